// Command probe-image builds the probe image the Docker tests use
// (test/containers/probe in a FROM scratch image, ENTRYPOINT ["/probe"];
// dockerenv.EnsureProbeImage) on the engine of $DOCKER_HOST or the local
// socket, without the docker CLI, and prints its tag. With -tag it also
// tags it under that name, e.g. the name examples/hello-template's .env
// expects:
//
//	go run ./test/dockerenv/cmd/probe-image -tag norsk-example/probe:dev
//
// Run it from inside this module (it builds the probe with the go
// command). Nothing is pulled. Exit 1 on failure, naming the step.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/test/dockerenv"
)

func main() {
	tag := flag.String("tag", "", "also tag the image as this name (e.g. norsk-example/probe:dev)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./test/dockerenv/cmd/probe-image [-tag NAME]\n\n"+
			"Builds the probe image (%s:<hash>) on the Docker engine and prints its tag.\n\n", dockerenv.ProbeRepo)
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "probe-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, extra string) error {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker engine client: %w", err)
	}
	defer cli.Close()
	tag, _, err := dockerenv.EnsureProbeImage(ctx, cli)
	if err != nil {
		return err
	}
	if extra != "" {
		if err := cli.ImageTag(ctx, tag, extra); err != nil {
			return fmt.Errorf("tag %s as %s: %w", tag, extra, err)
		}
		tag = extra
	}
	fmt.Println(tag)
	return nil
}
