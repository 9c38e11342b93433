//go:build !race

package deskgridtest

const raceEnabled = false
