// Package buildinfo is the version of the Norsk Manager binaries
// (norsk-manager, norsk-ctl and the worker it runs), shared so that they
// all report the same thing. It is internal to cmd/: libraries take their
// version as configuration (worker.Config.Version) instead of importing it.
package buildinfo
