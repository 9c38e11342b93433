//go:build race

package main

// raceEnabled makes the end-to-end tests build deskgrid with -race too.
const raceEnabled = true
