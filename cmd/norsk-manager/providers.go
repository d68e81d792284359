package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/spf13/pflag"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/providers"
)

// providerOptions are the flags of the cloud node providers.
type providerOptions struct {
	aws            bool
	awsEndpoint    string
	pendingTimeout time.Duration
	startupTimeout time.Duration
	workerURLs     string
}

func (p *providerOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&p.aws, "aws", false, "enable CreateAwsNode: credentials and default settings from the standard AWS configuration chain (AWS_* environment, shared config and credentials files, web identity, instance role)")
	f.StringVar(&p.awsEndpoint, "aws-endpoint", "", "with --aws: EC2 endpoint URL instead of the region's (an EC2-compatible cloud, or a test emulator)")
	f.DurationVar(&p.pendingTimeout, "node-pending-timeout", 10*time.Minute, "cloud nodes: terminate an instance not running this long after its create (PENDING_TIME_EXCEEDED)")
	f.DurationVar(&p.startupTimeout, "node-startup-timeout", 10*time.Minute, "cloud nodes: terminate an instance whose worker has not registered and pinged this long after it runs (STARTUP_TIME_EXCEEDED)")
	f.StringVar(&p.workerURLs, "worker-manager-url", "", "cloud nodes: comma-separated manager API addresses written into an instance's user data for its worker (default: --api-addr)")
}

func (p *providerOptions) validate() error {
	switch {
	case p.pendingTimeout <= 0:
		return fmt.Errorf("--node-pending-timeout %s must be positive", p.pendingTimeout)
	case p.startupTimeout <= 0:
		return fmt.Errorf("--node-startup-timeout %s must be positive", p.startupTimeout)
	case p.awsEndpoint != "" && !p.aws:
		return fmt.Errorf("--aws-endpoint needs --aws")
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
	return out, nil
}
