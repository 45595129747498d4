//go:build race

package upgrade

// raceDetector: the tests run with -race, which makes sync.Pool drop items at random.
const raceDetector = true
