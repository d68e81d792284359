//go:build !race

package membership

// raceEnabled reports whether the race detector is on: protoactor's cluster
// code has known data races, so its multi-member tests skip under -race.
const raceEnabled = false
