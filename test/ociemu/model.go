package ociemu

import "time"

// Lifecycle states of an instance (core.InstanceLifecycleStateEnum). The
// emulator moves instances PROVISIONING → RUNNING and, on termination,
// TERMINATING → TERMINATED; SetLifecycleState sets any of them.
const (
	// Provisioning is the state of a launched instance before it runs.
	Provisioning = "PROVISIONING"
	// Running is the state of a booted instance.
	Running = "RUNNING"
	// Starting is the state of a stopped instance being started.
	Starting = "STARTING"
	// Stopping is the state of an instance being stopped.
	Stopping = "STOPPING"
	// Stopped is the state of a stopped instance.
	Stopped = "STOPPED"
	// Terminating is the state of an instance after TerminateInstance.
	Terminating = "TERMINATING"
	// Terminated is the final state; OCI lists terminated instances for a
	// while, the emulator until Purge.
	Terminated = "TERMINATED"
)

var instanceStates = map[string]bool{
	"MOVING": true, Provisioning: true, Running: true, Starting: true, Stopping: true,
	Stopped: true, "CREATING_IMAGE": true, Terminating: true, Terminated: true,
}

// Architectures of images, as the emulator's default catalogue names them
// in Image.Architecture.
const (
	// ArchX86_64 is the architecture of AMD and Intel shapes.
	ArchX86_64 = "x86_64"
	// ArchAarch64 is the architecture of Ampere (A1, A2) shapes.
	ArchAarch64 = "aarch64"
)

// Instance is the emulator's view of an instance, as Instances and
// Instance return it (a copy).
type Instance struct {
	// ID is the instance OCID.
	ID string
	// CompartmentID, AvailabilityDomain, DisplayName and Shape are as
	// launched.
	CompartmentID, AvailabilityDomain, DisplayName, Shape string
	// FaultDomain is always FAULT-DOMAIN-1 unless given at launch.
	FaultDomain string
	// OCPUs and MemoryInGBs are the shape config (memory defaults to 16
	// GB per OCPU, 6 for A1 shapes, when not given).
	OCPUs, MemoryInGBs float64
	// ImageID is the image booted.
	ImageID string
	// SubnetID is the subnet of the primary VNIC.
	SubnetID string
	// State is the lifecycle state.
	State string
	// FreeformTags and Metadata are as launched; UserData is
	// metadata["user_data"] decoded from base64.
	FreeformTags, Metadata map[string]string
	// UserData is the decoded user_data metadata (nil when none).
	UserData []byte
	// VnicID and VnicAttachmentID name the primary VNIC and its
	// attachment.
	VnicID, VnicAttachmentID string
	// PrivateIP is the primary VNIC's private address (from
	// Options.PrivateIPTemplate unless createVnicDetails.privateIp was
	// given); PublicIP is empty when assignPublicIp was false.
	PrivateIP, PublicIP string
	// RetryToken is the opc-retry-token of the launch that created it.
	RetryToken string
	// TimeCreated is the launch time by the emulator's clock.
	TimeCreated time.Time
}

// Image is an image of the emulator's catalogue.
type Image struct {
	// ID is the image OCID.
	ID string
	// CompartmentID is empty for platform images, which ListImages returns
	// for every compartment; a custom image is listed only in its own.
	CompartmentID string
	// DisplayName follows OCI's platform image names, where only
	// non-x86 images name their architecture, e.g.
	// "Oracle-Linux-9.4-aarch64-2024.09.30-0" vs
	// "Oracle-Linux-9.4-2024.09.30-0".
	DisplayName string
	// OperatingSystem and OperatingSystemVersion, e.g. "Canonical Ubuntu",
	// "24.04".
	OperatingSystem, OperatingSystemVersion string
	// Architecture is ArchX86_64 or ArchAarch64. OCI has no such field; it
	// is not sent (put it into FreeformTags or DisplayName to show it).
	Architecture string
	// Shapes are the shapes the image boots on; ListImages?shape= filters
	// by it and LaunchInstance refuses other shapes with 400
	// InvalidParameter. Empty means every shape.
	Shapes []string
	// FreeformTags are sent as the image's freeformTags.
	FreeformTags map[string]string
	// TimeCreated orders ListImages (newest first by default).
	TimeCreated time.Time
}

// LaunchRecord is what a LaunchInstance call asked for, as the emulator
// decoded it.
type LaunchRecord struct {
	// RetryToken is the opc-retry-token header (the SDK makes one up for
	// every call that does not set it).
	RetryToken string
	// CompartmentID, AvailabilityDomain, DisplayName, Shape and
	// FaultDomain are the body's fields (empty when absent).
	CompartmentID, AvailabilityDomain, DisplayName, Shape, FaultDomain string
	// OCPUs and MemoryInGBs are shapeConfig's fields (0 when absent).
	OCPUs, MemoryInGBs float64
	// SourceType and ImageID are sourceDetails' fields (ImageID falls back
	// to the deprecated top-level imageId).
	SourceType, ImageID string
	// SubnetID is createVnicDetails.subnetId (or the deprecated top-level
	// subnetId); AssignPublicIP is createVnicDetails.assignPublicIp.
	SubnetID string
	// AssignPublicIP is nil when the request did not say.
	AssignPublicIP *bool
	// Metadata is the metadata map; UserData is metadata["user_data"]
	// decoded from base64 (nil when absent or not base64).
	Metadata map[string]string
	// UserData is the decoded user_data.
	UserData []byte
	// FreeformTags are the instance's freeform tags.
	FreeformTags map[string]string
	// Body is the raw JSON body.
	Body []byte
	// InstanceID is the instance created or, for a retry token seen
	// before, found; empty when the call failed before that.
	InstanceID string
	// Error is the error answered, if any (including a lost response's).
	Error *APIError
}

// Request is one request the emulator answered.
type Request struct {
	// Method and RequestURI are as received.
	Method, RequestURI string
	// Operation is the operation routed to ("" for an unknown path or an
	// unauthenticated request).
	Operation Operation
	// KeyID is the signature's keyId (possibly of a rejected signature).
	KeyID string
	// Status is the HTTP status answered (0 for a dropped connection).
	Status int
}

// Wire forms (JSON) of the Core Services API resources.

type wireShapeConfig struct {
	Ocpus       *float64 `json:"ocpus,omitempty"`
	MemoryInGBs *float64 `json:"memoryInGBs,omitempty"`
	Vcpus       *int     `json:"vcpus,omitempty"`
}

type wireSourceDetails struct {
	SourceType          string  `json:"sourceType"`
	ImageID             *string `json:"imageId,omitempty"`
	BootVolumeID        *string `json:"bootVolumeId,omitempty"`
	BootVolumeSizeInGBs *int64  `json:"bootVolumeSizeInGBs,omitempty"`
}

type wireCreateVnicDetails struct {
	SubnetID       *string `json:"subnetId"`
	AssignPublicIP *bool   `json:"assignPublicIp"`
	PrivateIP      *string `json:"privateIp"`
	DisplayName    *string `json:"displayName"`
	HostnameLabel  *string `json:"hostnameLabel"`
}

type wireLaunchDetails struct {
	AvailabilityDomain *string                   `json:"availabilityDomain"`
	CompartmentID      *string                   `json:"compartmentId"`
	DisplayName        *string                   `json:"displayName"`
	FaultDomain        *string                   `json:"faultDomain"`
	Shape              *string                   `json:"shape"`
	ShapeConfig        *wireShapeConfig          `json:"shapeConfig"`
	SourceDetails      *wireSourceDetails        `json:"sourceDetails"`
	ImageID            *string                   `json:"imageId"`
	SubnetID           *string                   `json:"subnetId"`
	CreateVnicDetails  *wireCreateVnicDetails    `json:"createVnicDetails"`
	Metadata           map[string]string         `json:"metadata"`
	FreeformTags       map[string]string         `json:"freeformTags"`
	DefinedTags        map[string]map[string]any `json:"definedTags"`
}

type wireInstance struct {
	AvailabilityDomain string                    `json:"availabilityDomain"`
	CompartmentID      string                    `json:"compartmentId"`
	ID                 string                    `json:"id"`
	LifecycleState     string                    `json:"lifecycleState"`
	Region             string                    `json:"region"`
	Shape              string                    `json:"shape"`
	TimeCreated        string                    `json:"timeCreated"`
	DisplayName        string                    `json:"displayName,omitempty"`
	FaultDomain        string                    `json:"faultDomain,omitempty"`
	FreeformTags       map[string]string         `json:"freeformTags"`
	DefinedTags        map[string]map[string]any `json:"definedTags"`
	ImageID            string                    `json:"imageId,omitempty"`
	LaunchMode         string                    `json:"launchMode"`
	Metadata           map[string]string         `json:"metadata"`
	ShapeConfig        *wireShapeConfig          `json:"shapeConfig,omitempty"`
	SourceDetails      *wireSourceDetails        `json:"sourceDetails,omitempty"`
}

type wireVnicAttachment struct {
	AvailabilityDomain string `json:"availabilityDomain"`
	CompartmentID      string `json:"compartmentId"`
	ID                 string `json:"id"`
	InstanceID         string `json:"instanceId"`
	LifecycleState     string `json:"lifecycleState"`
	TimeCreated        string `json:"timeCreated"`
	DisplayName        string `json:"displayName,omitempty"`
	NicIndex           int    `json:"nicIndex"`
	SubnetID           string `json:"subnetId"`
	VlanTag            int    `json:"vlanTag"`
	VnicID             string `json:"vnicId,omitempty"`
}

type wireVnic struct {
	AvailabilityDomain  string                    `json:"availabilityDomain"`
	CompartmentID       string                    `json:"compartmentId"`
	ID                  string                    `json:"id"`
	LifecycleState      string                    `json:"lifecycleState"`
	TimeCreated         string                    `json:"timeCreated"`
	DisplayName         string                    `json:"displayName,omitempty"`
	FreeformTags        map[string]string         `json:"freeformTags"`
	DefinedTags         map[string]map[string]any `json:"definedTags"`
	HostnameLabel       string                    `json:"hostnameLabel,omitempty"`
	IsPrimary           bool                      `json:"isPrimary"`
	MacAddress          string                    `json:"macAddress"`
	PrivateIP           string                    `json:"privateIp"`
	PublicIP            string                    `json:"publicIp,omitempty"`
	SkipSourceDestCheck bool                      `json:"skipSourceDestCheck"`
	SubnetID            string                    `json:"subnetId"`
}

type wireImage struct {
	CompartmentID          *string                   `json:"compartmentId"`
	CreateImageAllowed     bool                      `json:"createImageAllowed"`
	ID                     string                    `json:"id"`
	LifecycleState         string                    `json:"lifecycleState"`
	OperatingSystem        string                    `json:"operatingSystem"`
	OperatingSystemVersion string                    `json:"operatingSystemVersion"`
	TimeCreated            string                    `json:"timeCreated"`
	DisplayName            string                    `json:"displayName"`
	FreeformTags           map[string]string         `json:"freeformTags"`
	DefinedTags            map[string]map[string]any `json:"definedTags"`
	LaunchMode             string                    `json:"launchMode"`
	SizeInMBs              int64                     `json:"sizeInMBs"`
}
