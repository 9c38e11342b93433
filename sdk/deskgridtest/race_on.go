//go:build race

package deskgridtest

const raceEnabled = true
