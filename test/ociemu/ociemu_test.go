package ociemu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"

	"github.com/norsk-oss/norsk-manager/test/ociemu"
)

const compartment = ociemu.DefaultCompartment

// clients makes real SDK clients signing with key (the emulator's own when
// nil) and points them at emu.
func clients(t *testing.T, emu *ociemu.Server, key *ociemu.APIKey) (core.ComputeClient, core.VirtualNetworkClient) {
	t.Helper()
	cp := emu.ConfigurationProvider()
	if key != nil {
		cp = common.NewRawConfigurationProvider(key.Tenancy, key.User, emu.Region(), key.Fingerprint(), key.PrivateKeyPEM(), nil)
	}
	compute, err := core.NewComputeClientWithConfigurationProvider(cp)
	if err != nil {
		t.Fatalf("compute client: %v", err)
	}
	emu.ConfigureClient(&compute.BaseClient)
	network, err := core.NewVirtualNetworkClientWithConfigurationProvider(cp)
	if err != nil {
		t.Fatalf("network client: %v", err)
	}
	emu.ConfigureClient(&network.BaseClient)
	return compute, network
}

// details is a LaunchInstanceDetails for an x86 flex shape.
func details(emu *ociemu.Server, name string, tags map[string]string, userData string) core.LaunchInstanceDetails {
	return core.LaunchInstanceDetails{
		AvailabilityDomain: common.String(emu.AvailabilityDomains()[0]),
		CompartmentId:      common.String(compartment),
		DisplayName:        common.String(name),
		Shape:              common.String("VM.Standard.E4.Flex"),
		ShapeConfig:        &core.LaunchInstanceShapeConfigDetails{Ocpus: common.Float32(2), MemoryInGBs: common.Float32(8)},
		SourceDetails:      core.InstanceSourceViaImageDetails{ImageId: common.String(ociemu.ImageID("Canonical-Ubuntu-24.04-2024.10.09-0"))},
		CreateVnicDetails:  &core.CreateVnicDetails{SubnetId: common.String(ociemu.DefaultSubnet), AssignPublicIp: common.Bool(true)},
		Metadata:           map[string]string{"user_data": base64.StdEncoding.EncodeToString([]byte(userData))},
		FreeformTags:       tags,
	}
}

// serviceError asserts that err is an SDK ServiceError with status and
// code, and returns it.
func serviceError(t *testing.T, err error, status int, code string) common.ServiceError {
	t.Helper()
	if err == nil {
		t.Fatalf("want %d %s, got no error", status, code)
	}
	se, ok := common.IsServiceError(err)
	if !ok {
		t.Fatalf("want a ServiceError %d %s, got %T: %v", status, code, err, err)
	}
	if se.GetHTTPStatusCode() != status || se.GetCode() != code {
		t.Fatalf("want %d %s, got %d %s (%s)", status, code, se.GetHTTPStatusCode(), se.GetCode(), se.GetMessage())
	}
	if se.GetOpcRequestID() == "" {
		t.Errorf("%d %s without opc-request-id", status, code)
	}
	return se
}

func waitState(t *testing.T, compute core.ComputeClient, id string, want core.InstanceLifecycleStateEnum) core.Instance {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := compute.GetInstance(context.Background(), core.GetInstanceRequest{InstanceId: common.String(id)})
		if err != nil {
			t.Fatalf("GetInstance: %v", err)
		}
		if resp.LifecycleState == want {
			return resp.Instance
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s is %s, not %s, after 10 s", id, resp.LifecycleState, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLaunchRunVnicTerminate(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{
		RunningAfter:      150 * time.Millisecond,
		TerminatedAfter:   150 * time.Millisecond,
		PrivateIPTemplate: "127.0.3.%d",
	})
	compute, network := clients(t, emu, nil)
	ctx := context.Background()

	images, err := compute.ListImages(ctx, core.ListImagesRequest{
		CompartmentId:   common.String(compartment),
		OperatingSystem: common.String("Canonical Ubuntu"),
		Shape:           common.String("VM.Standard.E4.Flex"),
	})
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	if len(images.Items) == 0 || *images.Items[0].DisplayName != "Canonical-Ubuntu-24.04-2024.10.09-0" {
		t.Fatalf("newest Ubuntu x86 image: got %+v", images.Items)
	}

	tags := map[string]string{"norsk-cluster": "c1", "norsk-node": "n1"}
	d := details(emu, "norsk-n1", tags, "#!/bin/sh\necho hello\n")
	d.SourceDetails = core.InstanceSourceViaImageDetails{ImageId: images.Items[0].Id}
	launched, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d})
	if err != nil {
		t.Fatalf("LaunchInstance: %v", err)
	}
	if launched.LifecycleState != core.InstanceLifecycleStateProvisioning {
		t.Errorf("launch answer: state %s, want PROVISIONING", launched.LifecycleState)
	}
	if launched.OpcRequestId == nil || *launched.OpcRequestId == "" || launched.Etag == nil {
		t.Errorf("launch answer without opc-request-id or etag")
	}
	src, ok := launched.SourceDetails.(core.InstanceSourceViaImageDetails)
	if !ok || *src.ImageId != *images.Items[0].Id {
		t.Errorf("sourceDetails: %#v", launched.SourceDetails)
	}
	if *launched.ShapeConfig.Ocpus != 2 || *launched.ShapeConfig.MemoryInGBs != 8 || launched.FreeformTags["norsk-node"] != "n1" {
		t.Errorf("launch answer: shapeConfig %+v tags %v", launched.ShapeConfig, launched.FreeformTags)
	}
	id := *launched.Id

	rec, ok := emu.LastLaunch()
	if !ok || string(rec.UserData) != "#!/bin/sh\necho hello\n" || rec.FreeformTags["norsk-cluster"] != "c1" ||
		rec.RetryToken == "" || rec.OCPUs != 2 || rec.InstanceID != id || rec.Error != nil {
		t.Errorf("LastLaunch: %+v", rec)
	}

	running := waitState(t, compute, id, core.InstanceLifecycleStateRunning)
	if running.Metadata["user_data"] == "" || running.TimeCreated == nil {
		t.Errorf("running instance: %+v", running)
	}

	atts, err := compute.ListVnicAttachments(ctx, core.ListVnicAttachmentsRequest{
		CompartmentId: common.String(compartment), InstanceId: common.String(id),
	})
	if err != nil {
		t.Fatalf("ListVnicAttachments: %v", err)
	}
	if len(atts.Items) != 1 || atts.Items[0].LifecycleState != core.VnicAttachmentLifecycleStateAttached {
		t.Fatalf("attachments: %+v", atts.Items)
	}
	vnic, err := network.GetVnic(ctx, core.GetVnicRequest{VnicId: atts.Items[0].VnicId})
	if err != nil {
		t.Fatalf("GetVnic: %v", err)
	}
	if *vnic.PrivateIp != "127.0.3.1" || vnic.PublicIp == nil || *vnic.PublicIp != "127.0.2.1" || !*vnic.IsPrimary {
		t.Errorf("vnic: private %v public %v", vnic.PrivateIp, vnic.PublicIp)
	}

	list, err := compute.ListInstances(ctx, core.ListInstancesRequest{
		CompartmentId:  common.String(compartment),
		LifecycleState: core.InstanceLifecycleStateRunning,
	})
	if err != nil {
		t.Fatalf("ListInstances: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].FreeformTags["norsk-node"] != "n1" {
		t.Errorf("ListInstances RUNNING: %+v", list.Items)
	}
	other, err := compute.ListInstances(ctx, core.ListInstancesRequest{CompartmentId: common.String("ocid1.compartment.oc1..other")})
	if err != nil || len(other.Items) != 0 {
		t.Errorf("another compartment: %v %+v", err, other.Items)
	}

	term, err := compute.TerminateInstance(ctx, core.TerminateInstanceRequest{InstanceId: common.String(id)})
	if err != nil {
		t.Fatalf("TerminateInstance: %v", err)
	}
	if term.RawResponse.StatusCode != http.StatusNoContent {
		t.Errorf("TerminateInstance: status %d", term.RawResponse.StatusCode)
	}
	got, err := compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(id)})
	if err != nil || got.LifecycleState != core.InstanceLifecycleStateTerminating {
		t.Errorf("after terminate: %v %s", err, got.LifecycleState)
	}
	waitState(t, compute, id, core.InstanceLifecycleStateTerminated)
	atts, err = compute.ListVnicAttachments(ctx, core.ListVnicAttachmentsRequest{CompartmentId: common.String(compartment), InstanceId: common.String(id)})
	if err != nil || atts.Items[0].LifecycleState != core.VnicAttachmentLifecycleStateDetached {
		t.Errorf("attachment after termination: %v %+v", err, atts.Items)
	}
	if _, err := compute.TerminateInstance(ctx, core.TerminateInstanceRequest{InstanceId: common.String(id)}); err != nil {
		t.Errorf("terminating a terminated instance: %v", err)
	}

	if n := emu.Calls(ociemu.OpLaunchInstance); n != 1 {
		t.Errorf("LaunchInstance calls: %d", n)
	}
	if n := emu.Calls(ociemu.OpGetVnic); n != 1 {
		t.Errorf("GetVnic calls: %d", n)
	}
	if f := emu.AuthFailures(); len(f) != 0 {
		t.Errorf("auth failures: %v", f)
	}
	insts := emu.Instances()
	if len(insts) != 1 || insts[0].State != ociemu.Terminated || insts[0].PrivateIP != "127.0.3.1" {
		t.Errorf("Instances: %+v", insts)
	}
}

func TestSignatureVerification(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	ctx := context.Background()
	list := core.ListInstancesRequest{CompartmentId: common.String(compartment)}

	good, _ := clients(t, emu, nil)
	if _, err := good.ListInstances(ctx, list); err != nil {
		t.Fatalf("the emulator's own key: %v", err)
	}

	// Another private key presented under the emulator key's keyId.
	other, err := ociemu.NewAPIKey(ociemu.DefaultTenancy, ociemu.DefaultUser)
	if err != nil {
		t.Fatal(err)
	}
	impostorCP := common.NewRawConfigurationProvider(ociemu.DefaultTenancy, ociemu.DefaultUser, emu.Region(),
		emu.Key().Fingerprint(), other.PrivateKeyPEM(), nil)
	impostor, err := core.NewComputeClientWithConfigurationProvider(impostorCP)
	if err != nil {
		t.Fatal(err)
	}
	emu.ConfigureClient(&impostor.BaseClient)
	_, err = impostor.ListInstances(ctx, list)
	serviceError(t, err, http.StatusUnauthorized, "NotAuthenticated")
	_, err = impostor.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: details(emu, "x", nil, "")})
	serviceError(t, err, http.StatusUnauthorized, "NotAuthenticated")

	// The other key under its own keyId: unknown until trusted.
	stranger, _ := clients(t, emu, other)
	_, err = stranger.ListInstances(ctx, list)
	serviceError(t, err, http.StatusUnauthorized, "NotAuthenticated")
	emu.TrustKey(other.KeyID(), &other.PrivateKey.PublicKey)
	if _, err := stranger.ListInstances(ctx, list); err != nil {
		t.Errorf("trusted key: %v", err)
	}
	if len(emu.Instances()) != 0 || emu.Calls(ociemu.OpLaunchInstance) != 0 {
		t.Errorf("a rejected launch reached the emulator")
	}

	// Unsigned requests.
	resp, err := http.Get(emu.URL() + "/20160918/instances?compartmentId=" + compartment)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Code, Message string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || body.Code != "NotAuthenticated" || resp.Header.Get("opc-request-id") == "" {
		t.Errorf("unsigned: %d %+v", resp.StatusCode, body)
	}

	// Requests signed by the SDK's own signer, then altered.
	signer := common.DefaultRequestSigner(emu.ConfigurationProvider())
	send := func(name string, method, path string, payload []byte, alter func(*http.Request), want int) {
		t.Helper()
		req, err := http.NewRequest(method, emu.URL()+path, bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		req.Header.Set("Content-Type", "application/json")
		if alter != nil && strings.HasPrefix(name, "date") {
			alter(req)
		}
		if err := signer.Sign(req); err != nil {
			t.Fatal(err)
		}
		if alter != nil && !strings.HasPrefix(name, "date") {
			alter(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", name, resp.StatusCode, want)
		}
	}
	listPath := "/20160918/instances?compartmentId=" + compartment
	send("signed", http.MethodGet, listPath, nil, nil, http.StatusOK)
	send("other query", http.MethodGet, listPath, nil, func(r *http.Request) { r.URL.RawQuery += "&displayName=x" }, http.StatusUnauthorized)
	send("other method", http.MethodGet, "/20160918/instances/ocid1.instance.oc1.emu.x", nil, func(r *http.Request) { r.Method = http.MethodDelete }, http.StatusUnauthorized)
	send("date stale", http.MethodGet, listPath, nil, func(r *http.Request) {
		r.Header.Set("Date", time.Now().Add(-10*time.Minute).UTC().Format(http.TimeFormat))
	}, http.StatusUnauthorized)
	payload, _ := json.Marshal(map[string]string{"compartmentId": compartment})
	tampered, _ := json.Marshal(map[string]string{"compartmentId": strings.ToUpper(compartment)})
	send("body", http.MethodPost, "/20160918/instances", payload, func(r *http.Request) {
		r.Body = io.NopCloser(bytes.NewReader(tampered))
	}, http.StatusUnauthorized)
	send("body signed", http.MethodPost, "/20160918/instances", payload, nil, http.StatusBadRequest) // authenticated, then invalid
	send("no body headers", http.MethodPost, "/20160918/instances", payload, func(r *http.Request) {
		a := r.Header.Get("Authorization")
		r.Header.Set("Authorization", strings.Replace(a, " content-length content-type x-content-sha256", "", 1))
	}, http.StatusUnauthorized)

	failures := emu.AuthFailures()
	if len(failures) != 9 {
		t.Errorf("auth failures: %d\n%s", len(failures), strings.Join(failures, "\n"))
	}
	for _, want := range []string{"does not verify", "unknown keyId", "no Authorization", "from the server's clock", "x-content-sha256", "does not cover content-length"} {
		if !strings.Contains(strings.Join(failures, "\n"), want) {
			t.Errorf("no auth failure mentions %q:\n%s", want, strings.Join(failures, "\n"))
		}
	}
}

func TestRetryTokenAndLostResponses(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	compute, _ := clients(t, emu, nil)
	ctx := context.Background()

	d := details(emu, "n1", map[string]string{"node": "n1"}, "x")
	first, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d, OpcRetryToken: common.String("tok-1")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d, OpcRetryToken: common.String("tok-1")})
	if err != nil {
		t.Fatal(err)
	}
	if *again.Id != *first.Id || len(emu.Instances()) != 1 || emu.Calls(ociemu.OpLaunchInstance) != 2 {
		t.Fatalf("same retry token: %s then %s, %d instances", *first.Id, *again.Id, len(emu.Instances()))
	}
	if again.LifecycleState != core.InstanceLifecycleStateRunning {
		t.Errorf("a replay answers with the current state: %s", again.LifecycleState)
	}
	d2 := d
	d2.DisplayName = common.String("n1-renamed")
	_, err = compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d2, OpcRetryToken: common.String("tok-1")})
	serviceError(t, err, http.StatusConflict, "Conflict")
	_, err = compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d, OpcRetryToken: common.String(strings.Repeat("t", 65))})
	serviceError(t, err, http.StatusBadRequest, "InvalidParameter")

	// A lost answer (connection closed): the instance exists; the same
	// retry token finds it.
	emu.LoseLaunchResponses(1, nil)
	d3 := details(emu, "n2", map[string]string{"node": "n2"}, "x")
	_, err = compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d3, OpcRetryToken: common.String("tok-2")})
	if err == nil {
		t.Fatal("lost response: no error")
	}
	if _, ok := common.IsServiceError(err); ok {
		t.Fatalf("lost response: want a network error, got %v", err)
	}
	tagged := emu.InstancesTagged("node", "n2")
	if len(tagged) != 1 {
		t.Fatalf("lost response: %d instances tagged n2", len(tagged))
	}
	retried, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d3, OpcRetryToken: common.String("tok-2")})
	if err != nil || *retried.Id != tagged[0].ID {
		t.Fatalf("retry after a lost response: %v (%v vs %s)", err, retried.Id, tagged[0].ID)
	}

	// A lost answer as a 500 with an SDK-made retry token: found by tag.
	emu.LoseLaunchResponses(1, &ociemu.ErrInternal)
	d4 := details(emu, "n3", map[string]string{"node": "n3"}, "x")
	_, err = compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d4})
	serviceError(t, err, http.StatusInternalServerError, "InternalError")
	list, err := compute.ListInstances(ctx, core.ListInstancesRequest{CompartmentId: common.String(compartment), DisplayName: common.String("n3")})
	if err != nil || len(list.Items) != 1 || list.Items[0].FreeformTags["node"] != "n3" {
		t.Fatalf("find the lost instance by name and tag: %v %+v", err, list.Items)
	}
	if rec, _ := emu.LastLaunch(); rec.Error == nil || rec.Error.Status != 500 || rec.InstanceID != *list.Items[0].Id {
		t.Errorf("LastLaunch of a lost answer: %+v", rec)
	}
	if n := len(emu.Instances()); n != 3 {
		t.Errorf("instances: %d, want 3", n)
	}
}

func TestErrors(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	compute, network := clients(t, emu, nil)
	ctx := context.Background()
	launch := func(d core.LaunchInstanceDetails) error {
		_, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d})
		return err
	}

	injected := []ociemu.APIError{
		ociemu.ErrInvalidParameter, ociemu.ErrNotFound, ociemu.ErrConflict, ociemu.ErrTooManyRequests,
		ociemu.ErrOutOfCapacity, ociemu.ErrServiceUnavailable, ociemu.ErrLimitExceeded.With("cores of VM.Standard.E4.Flex"),
	}
	emu.InjectErrors(ociemu.OpLaunchInstance, injected...)
	for _, want := range injected {
		se := serviceError(t, launch(details(emu, "n", nil, "")), want.Status, want.Code)
		if se.GetMessage() != want.Message {
			t.Errorf("%s: message %q, want %q", want.Code, se.GetMessage(), want.Message)
		}
	}
	if len(emu.Instances()) != 0 || emu.Calls(ociemu.OpLaunchInstance) != len(injected) || len(emu.Launches()) != len(injected) {
		t.Errorf("injected errors: %d instances, %d calls, %d launches", len(emu.Instances()), emu.Calls(ociemu.OpLaunchInstance), len(emu.Launches()))
	}
	if err := launch(details(emu, "n", nil, "")); err != nil {
		t.Errorf("after the injected errors: %v", err)
	}

	emu.FailNext(ociemu.OpGetVnic, 2, ociemu.ErrServiceUnavailable)
	for range 2 {
		_, err := network.GetVnic(ctx, core.GetVnicRequest{VnicId: common.String(emu.Instances()[0].VnicID)})
		serviceError(t, err, http.StatusServiceUnavailable, "ServiceUnavailable")
	}
	if _, err := network.GetVnic(ctx, core.GetVnicRequest{VnicId: common.String(emu.Instances()[0].VnicID)}); err != nil {
		t.Errorf("GetVnic after the injected errors: %v", err)
	}

	// What the emulator finds wrong itself.
	_, err := compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String("ocid1.instance.oc1.emu.nosuch")})
	serviceError(t, err, http.StatusNotFound, "NotAuthorizedOrNotFound")
	noShapeConfig := details(emu, "n", nil, "")
	noShapeConfig.ShapeConfig = nil
	serviceError(t, launch(noShapeConfig), http.StatusBadRequest, "InvalidParameter")
	armOnX86 := details(emu, "n", nil, "")
	armOnX86.SourceDetails = core.InstanceSourceViaImageDetails{ImageId: common.String(ociemu.ImageID("Oracle-Linux-9.4-aarch64-2024.09.30-0"))}
	serviceError(t, launch(armOnX86), http.StatusBadRequest, "InvalidParameter")
	noImage := details(emu, "n", nil, "")
	noImage.SourceDetails = core.InstanceSourceViaImageDetails{ImageId: common.String("ocid1.image.oc1.emu.nosuch")}
	serviceError(t, launch(noImage), http.StatusNotFound, "NotAuthorizedOrNotFound")
	badAD := details(emu, "n", nil, "")
	badAD.AvailabilityDomain = common.String("EMU:OTHER-AD-9")
	serviceError(t, launch(badAD), http.StatusBadRequest, "InvalidParameter")
	badUserData := details(emu, "n", nil, "")
	badUserData.Metadata = map[string]string{"user_data": "not base64!"}
	serviceError(t, launch(badUserData), http.StatusBadRequest, "InvalidParameter")
	bigUserData := details(emu, "n", nil, strings.Repeat("x", 24000))
	serviceError(t, launch(bigUserData), http.StatusBadRequest, "InvalidParameter")
	if n := len(emu.Instances()); n != 1 {
		t.Errorf("instances after refused launches: %d", n)
	}

	// ListImages is one of the operations the SDK retries by default
	// (DefaultRetryPolicy: 429, 409 IncorrectState/LockConflict, 5xx but
	// 501, network errors): one injected 429 is invisible to the caller.
	emu.InjectErrors(ociemu.OpListImages, ociemu.ErrTooManyRequests)
	if _, err := compute.ListImages(ctx, core.ListImagesRequest{CompartmentId: common.String(compartment)}); err != nil {
		t.Errorf("ListImages with the SDK's default retry: %v", err)
	}
	if n := emu.Calls(ociemu.OpListImages); n != 2 {
		t.Errorf("ListImages calls: %d, want 2 (a retry)", n)
	}
	emu.InjectErrors(ociemu.OpListImages, ociemu.ErrTooManyRequests)
	noRetry := common.NoRetryPolicy()
	_, err = compute.ListImages(ctx, core.ListImagesRequest{CompartmentId: common.String(compartment), RequestMetadata: common.RequestMetadata{RetryPolicy: &noRetry}})
	serviceError(t, err, http.StatusTooManyRequests, "TooManyRequests")
}

func TestListImagesByArchitecture(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	compute, _ := clients(t, emu, nil)
	ctx := context.Background()
	list := func(req core.ListImagesRequest) []core.Image {
		t.Helper()
		req.CompartmentId = common.String(compartment)
		resp, err := compute.ListImages(ctx, req)
		if err != nil {
			t.Fatalf("ListImages: %v", err)
		}
		return resp.Items
	}
	names := func(imgs []core.Image) []string {
		var out []string
		for _, im := range imgs {
			out = append(out, *im.DisplayName)
		}
		return out
	}

	arm := list(core.ListImagesRequest{Shape: common.String("VM.Standard.A1.Flex")})
	if len(arm) != 3 || *arm[0].DisplayName != "Canonical-Ubuntu-24.04-aarch64-2024.10.09-0" {
		t.Errorf("A1 images, newest first: %v", names(arm))
	}
	for _, im := range arm {
		if !strings.Contains(*im.DisplayName, "aarch64") {
			t.Errorf("A1 image without aarch64 in its name: %s", *im.DisplayName)
		}
	}
	x86 := list(core.ListImagesRequest{
		OperatingSystem: common.String("Canonical Ubuntu"), OperatingSystemVersion: common.String("24.04"),
		Shape: common.String("VM.Standard.E5.Flex"),
	})
	if got := names(x86); len(got) != 2 || got[0] != "Canonical-Ubuntu-24.04-2024.10.09-0" || got[1] != "Canonical-Ubuntu-24.04-2024.08.15-0" {
		t.Errorf("Ubuntu 24.04 x86 images, newest first: %v", got)
	}
	byName := list(core.ListImagesRequest{SortBy: core.ListImagesSortByDisplayname, OperatingSystem: common.String("Oracle Linux")})
	if got := names(byName); len(got) != 2 || got[0] != "Oracle-Linux-9.4-2024.09.30-0" {
		t.Errorf("Oracle Linux by name: %v", got)
	}

	// A custom image tagged with its architecture, in one compartment.
	emu.AddImage(ociemu.Image{
		CompartmentID: compartment, DisplayName: "norsk-worker-arm64", OperatingSystem: "Canonical Ubuntu",
		OperatingSystemVersion: "24.04", Architecture: ociemu.ArchAarch64, Shapes: ociemu.ArmShapes,
		FreeformTags: map[string]string{"arch": "aarch64"},
	})
	custom := list(core.ListImagesRequest{DisplayName: common.String("norsk-worker-arm64")})
	if len(custom) != 1 || custom[0].FreeformTags["arch"] != "aarch64" || custom[0].CompartmentId == nil {
		t.Errorf("custom image: %+v", custom)
	}
	if *list(core.ListImagesRequest{Shape: common.String("VM.Standard.A1.Flex")})[0].DisplayName != "norsk-worker-arm64" {
		t.Errorf("the newest A1 image is not the custom one")
	}
	other, err := compute.ListImages(ctx, core.ListImagesRequest{CompartmentId: common.String("ocid1.compartment.oc1..other"), DisplayName: common.String("norsk-worker-arm64")})
	if err != nil || len(other.Items) != 0 {
		t.Errorf("custom image seen from another compartment: %v %d", err, len(other.Items))
	}
	img, err := compute.GetImage(ctx, core.GetImageRequest{ImageId: custom[0].Id})
	if err != nil || *img.DisplayName != "norsk-worker-arm64" {
		t.Errorf("GetImage: %v", err)
	}

	d := details(emu, "arm", nil, "")
	d.Shape = common.String("VM.Standard.A1.Flex")
	d.ShapeConfig = &core.LaunchInstanceShapeConfigDetails{Ocpus: common.Float32(1)}
	d.SourceDetails = core.InstanceSourceViaImageDetails{ImageId: arm[0].Id}
	got, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d})
	if err != nil {
		t.Fatalf("launch on A1: %v", err)
	}
	if *got.ShapeConfig.MemoryInGBs != 6 {
		t.Errorf("A1 default memory: %v", *got.ShapeConfig.MemoryInGBs)
	}
}

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLifecycleControlsAndPaging(t *testing.T) {
	clk := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} // far from the real clock: signatures still verify
	emu := ociemu.New(t, ociemu.Options{RunningAfter: time.Minute, TerminatedAfter: ociemu.Never, PageSize: 2, Now: clk.Now})
	compute, _ := clients(t, emu, nil)
	ctx := context.Background()
	state := func(id string) core.InstanceLifecycleStateEnum {
		t.Helper()
		resp, err := compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(id)})
		if err != nil {
			t.Fatalf("GetInstance: %v", err)
		}
		return resp.LifecycleState
	}

	emu.NeverRunning(1)
	var ids []string
	for i := range 5 {
		resp, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: details(emu, fmt.Sprintf("n%d", i), nil, "")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, *resp.Id)
		clk.Add(time.Second)
	}
	stuck := ids[0]
	if s := state(ids[1]); s != core.InstanceLifecycleStateProvisioning {
		t.Errorf("before RunningAfter: %s", s)
	}
	atts, err := compute.ListVnicAttachments(ctx, core.ListVnicAttachmentsRequest{CompartmentId: common.String(compartment), InstanceId: common.String(ids[1])})
	if err != nil || atts.Items[0].LifecycleState != core.VnicAttachmentLifecycleStateAttaching {
		t.Errorf("attachment while provisioning: %v %+v", err, atts.Items)
	}
	clk.Add(time.Hour)
	if s := state(ids[1]); s != core.InstanceLifecycleStateRunning {
		t.Errorf("after RunningAfter: %s", s)
	}
	if s := state(stuck); s != core.InstanceLifecycleStateProvisioning {
		t.Errorf("NeverRunning instance: %s", s)
	}
	if err := emu.Run(stuck); err != nil {
		t.Fatal(err)
	}
	if s := state(stuck); s != core.InstanceLifecycleStateRunning {
		t.Errorf("after Run: %s", s)
	}
	if err := emu.Run(stuck); err == nil {
		t.Errorf("Run of a running instance: no error")
	}

	// Pages of 2, newest first.
	var seen []string
	req := core.ListInstancesRequest{CompartmentId: common.String(compartment)}
	for pages := 0; ; pages++ {
		resp, err := compute.ListInstances(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Items) > 2 {
			t.Fatalf("page of %d", len(resp.Items))
		}
		for _, in := range resp.Items {
			seen = append(seen, *in.Id)
		}
		if resp.OpcNextPage == nil {
			break
		}
		req.Page = resp.OpcNextPage
	}
	if len(seen) != 5 || seen[0] != ids[4] || seen[4] != ids[0] {
		t.Errorf("paged list: %v, launched %v", seen, ids)
	}

	// TerminatedAfter Never: TERMINATING until told.
	if _, err := compute.TerminateInstance(ctx, core.TerminateInstanceRequest{InstanceId: common.String(stuck)}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	if s := state(stuck); s != core.InstanceLifecycleStateTerminating {
		t.Errorf("TerminatedAfter Never: %s", s)
	}
	if err := emu.SetLifecycleState(stuck, ociemu.Terminated); err != nil {
		t.Fatal(err)
	}
	if s := state(stuck); s != core.InstanceLifecycleStateTerminated {
		t.Errorf("after SetLifecycleState: %s", s)
	}
	if err := emu.Purge(stuck); err != nil {
		t.Fatal(err)
	}
	_, err = compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(stuck)})
	serviceError(t, err, http.StatusNotFound, "NotAuthorizedOrNotFound")
	if err := emu.SetLifecycleState(ids[1], "BROKEN"); err == nil {
		t.Errorf("SetLifecycleState accepted BROKEN")
	}
	if in, _ := emu.Instance(ids[1]); !in.TimeCreated.Equal(time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)) {
		t.Errorf("TimeCreated by the emulator's clock: %v", in.TimeCreated)
	}
}

func TestConcurrentLaunches(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	compute, network := clients(t, emu, nil)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			d := details(emu, fmt.Sprintf("c%d", i), map[string]string{"i": fmt.Sprint(i)}, "")
			resp, err := compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: d})
			if err != nil {
				errs <- err
				return
			}
			if _, err := compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: resp.Id}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ips := map[string]bool{}
	for _, in := range emu.Instances() {
		vnic, err := network.GetVnic(ctx, core.GetVnicRequest{VnicId: common.String(in.VnicID)})
		if err != nil {
			t.Fatal(err)
		}
		ips[*vnic.PrivateIp] = true
	}
	if len(ips) != n {
		t.Errorf("distinct private IPs: %d, want %d", len(ips), n)
	}
}

func TestConfigureClientRefusesOtherHosts(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	compute, _ := clients(t, emu, nil)
	compute.Host = "http://127.0.0.2:9" // not the emulator
	_, err := compute.ListInstances(context.Background(), core.ListInstancesRequest{CompartmentId: common.String(compartment)})
	if err == nil || !strings.Contains(err.Error(), "only the emulator") {
		t.Errorf("a request to another host: %v", err)
	}
	var se common.ServiceError
	if errors.As(err, &se) {
		t.Errorf("refusal reported as a service error: %v", se)
	}
}
