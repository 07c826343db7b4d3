//go:build !unix

package main

// ignoreBrokenPipes: only Unix kills a process that writes to a closed
// pipe.
func ignoreBrokenPipes() {}
