// Package ociemu is an in-process emulator of the part of the Oracle Cloud
// Infrastructure Core Services API (version 20160918) that a compute node
// provider uses, for tests that drive the real oci-go-sdk clients without
// a cloud account or a network.
//
// It serves, over plain HTTP on 127.0.0.1 (net/http/httptest):
//
//	LaunchInstance      POST   /20160918/instances           (opc-retry-token idempotency)
//	GetInstance         GET    /20160918/instances/{id}
//	ListInstances       GET    /20160918/instances?compartmentId=&availabilityDomain=&displayName=&lifecycleState=
//	TerminateInstance   DELETE /20160918/instances/{id}      (204; TERMINATING, then TERMINATED)
//	ListVnicAttachments GET    /20160918/vnicAttachments?compartmentId=&instanceId=
//	GetVnic             GET    /20160918/vnics/{id}          (VirtualNetworkClient)
//	ListImages          GET    /20160918/images?compartmentId=&operatingSystem=&shape=
//	GetImage            GET    /20160918/images/{id}
//
// Every request must carry an OCI HTTP signature (draft-cavage, rsa-sha256,
// keyId "tenancy/user/fingerprint") by a key the emulator trusts, over
// (request-target), host and date, plus content-length, content-type and
// x-content-sha256 for POST, PUT and PATCH; anything else is answered 401
// NotAuthenticated, which the SDK returns as a common.ServiceError. Errors
// have OCI's form: the status, a JSON body {"code", "message"} and an
// opc-request-id header.
//
// A test starts a Server, makes SDK clients from ConfigurationProvider and
// points them at it with ConfigureClient:
//
//	emu := ociemu.New(t, ociemu.Options{RunningAfter: 100 * time.Millisecond})
//	compute, err := core.NewComputeClientWithConfigurationProvider(emu.ConfigurationProvider())
//	// check err
//	emu.ConfigureClient(&compute.BaseClient)
//	network, err := core.NewVirtualNetworkClientWithConfigurationProvider(emu.ConfigurationProvider())
//	// check err
//	emu.ConfigureClient(&network.BaseClient)
//
// Test controls: InjectErrors and FailNext queue errors for the next calls
// of an operation; Calls counts them; LastLaunch and Launches return the
// LaunchInstance bodies (user data decoded, tags); Instances lists what
// was launched; LoseLaunchResponses creates an instance and loses the
// answer; NeverRunning, Run and SetLifecycleState control the lifecycle.
// See docs/design/cloud-emulators.md.
package ociemu
