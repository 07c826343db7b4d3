// Package depgraph holds the test that keeps the module's import graph as
// README.md's "Code layout" section draws it: dependencies point down only.
// It has no code of its own.
package depgraph
