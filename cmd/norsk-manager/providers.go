package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/common/auth"
	"github.com/spf13/pflag"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/providers"
)

// providerOptions are the flags of the cloud node providers.
type providerOptions struct {
	aws            bool
	awsEndpoint    string
	ociCompartment string
	ociConfig      string
	ociProfile     string
	ociPrincipals  bool
	ociEndpoint    string
	ociOCPUs       float64
	ociMemoryGB    float64
	pendingTimeout time.Duration
	startupTimeout time.Duration
	bootTime       time.Duration
	workerURLs     string
}

func (p *providerOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&p.aws, "aws", false, "enable CreateAwsNode: credentials and default settings from the standard AWS configuration chain (AWS_* environment, shared config and credentials files, web identity, instance role)")
	f.StringVar(&p.awsEndpoint, "aws-endpoint", "", "with --aws: EC2 endpoint URL instead of the region's (an EC2-compatible cloud, or a test emulator)")
	f.StringVar(&p.ociCompartment, "oci-compartment", "", "enable CreateOciNode: OCID of the compartment instances are launched into")
	f.StringVar(&p.ociConfig, "oci-config", "", "with --oci-compartment: OCI config file (default: ~/.oci/config or $OCI_CONFIG_FILE)")
	f.StringVar(&p.ociProfile, "oci-profile", "DEFAULT", "with --oci-compartment: profile of the OCI config file")
	f.BoolVar(&p.ociPrincipals, "oci-instance-principals", false, "with --oci-compartment: authenticate as the OCI instance the manager runs on instead of with a config file")
	f.StringVar(&p.ociEndpoint, "oci-endpoint", "", "with --oci-compartment: OCI API endpoint URL (http(s)://host[:port]) instead of the region's (an OCI-compatible cloud, or a test emulator)")
	f.Float64Var(&p.ociOCPUs, "oci-flex-ocpus", 0, "with --oci-compartment: OCPUs of instances of flexible shapes (*.Flex; required for them)")
	f.Float64Var(&p.ociMemoryGB, "oci-flex-memory-gb", 0, "with --oci-compartment: memory in GB of instances of flexible shapes (default: OCI's for the OCPUs)")
	f.DurationVar(&p.pendingTimeout, "node-pending-timeout", 10*time.Minute, "cloud nodes: terminate an instance not running this long after its create (PENDING_TIME_EXCEEDED)")
	f.DurationVar(&p.startupTimeout, "node-startup-timeout", 10*time.Minute, "cloud nodes: terminate an instance whose worker has not registered and pinged this long after it runs (STARTUP_TIME_EXCEEDED)")
	f.DurationVar(&p.bootTime, "node-boot-time", placement.DefaultNodeBootTime, "nodes the placement engine creates: how long one is expected to take from its create to a worker taking jobs; a HIGH priority job whose pool sets highPriorityProvisionWaitSeconds waits for such a node instead of preempting only if it is expected within that wait")
	f.StringVar(&p.workerURLs, "worker-manager-url", "", "cloud nodes: comma-separated manager API addresses written into an instance's user data for its worker (default: --api-addr)")
}

func (p *providerOptions) validate() error {
	switch {
	case p.pendingTimeout <= 0:
		return fmt.Errorf("--node-pending-timeout %s must be positive", p.pendingTimeout)
	case p.startupTimeout <= 0:
		return fmt.Errorf("--node-startup-timeout %s must be positive", p.startupTimeout)
	case p.bootTime <= 0:
		return fmt.Errorf("--node-boot-time %s must be positive", p.bootTime)
	case p.awsEndpoint != "" && !p.aws:
		return fmt.Errorf("--aws-endpoint needs --aws")
	case p.ociCompartment == "" && (p.ociConfig != "" || p.ociPrincipals || p.ociEndpoint != "" || p.ociOCPUs != 0 || p.ociMemoryGB != 0):
		return fmt.Errorf("--oci-config, --oci-instance-principals, --oci-endpoint and --oci-flex-* need --oci-compartment")
	case p.ociPrincipals && p.ociConfig != "":
		return fmt.Errorf("--oci-instance-principals and --oci-config exclude each other")
	case p.ociOCPUs < 0 || p.ociMemoryGB < 0:
		return fmt.Errorf("--oci-flex-ocpus and --oci-flex-memory-gb must not be negative")
	}
	return nil
}

// build returns the configured providers.
func (p *providerOptions) build(ctx context.Context, log *slog.Logger) (map[managerpb.NodeProvider]providers.Provider, error) {
	out := map[managerpb.NodeProvider]providers.Provider{}
	if p.aws {
		base, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("--aws: load the AWS configuration: %w", err)
		}
		out[managerpb.NodeProvider_NODE_PROVIDER_AWS] = providers.NewAWS(providers.AWSConfig{
			Base: base, Endpoint: p.awsEndpoint, Logger: log})
		log.Info("AWS provider enabled", "endpoint", p.awsEndpoint)
	}
	if p.ociCompartment != "" {
		var cp common.ConfigurationProvider
		switch {
		case p.ociPrincipals:
			ip, err := auth.InstancePrincipalConfigurationProvider()
			if err != nil {
				return nil, fmt.Errorf("--oci-instance-principals: %w", err)
			}
			cp = ip
		case p.ociConfig != "":
			cp = common.CustomProfileConfigProvider(p.ociConfig, p.ociProfile)
		default:
			cp = common.CustomProfileConfigProvider("", p.ociProfile)
		}
		oci, err := providers.NewOCI(providers.OCIConfig{Provider: cp, CompartmentID: p.ociCompartment, Endpoint: p.ociEndpoint,
			ShapeOCPUs: float32(p.ociOCPUs), ShapeMemoryGB: float32(p.ociMemoryGB), Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--oci-compartment: %w", err)
		}
		out[managerpb.NodeProvider_NODE_PROVIDER_OCI] = oci
		log.Info("OCI provider enabled", "compartment", p.ociCompartment, "endpoint", p.ociEndpoint)
	}
	return out, nil
}
