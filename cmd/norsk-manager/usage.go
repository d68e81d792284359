package main

import (
	"net"
)

// exitCodesHelp is the exit-code table of norsk-manager --help (the
// README promises it). main exits 2 for a *usageError and 1 for any
// other error.
const exitCodesHelp = `
Exit codes:
  0  stopped by SIGINT or SIGTERM (Ctrl-C); jobs keep running on their workers
  1  failed at run time: the data dir cannot be used (held by another process,
     written by the other mode, failing its integrity checks), a port cannot be
     bound, a cloud provider cannot be set up, another cluster manager already
     has this --name, or --dev could not start its worker or job
  2  bad flag or argument (the message names the flag); nothing was created`

// checkListenAddr validates a bind address flag (--api-addr,
// --metrics-addr): host:port with a numeric port (0 picks a free one); an
// empty host binds every interface. The error is a usage error naming the
// flag.
func checkListenAddr(flag, addr, example string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || !validPort(port) {
		return usagef("%s %q: want host:port with a numeric port, e.g. %s", flag, addr, example)
	}
	return nil
}
