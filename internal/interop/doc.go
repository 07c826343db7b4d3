// Package interop runs other projects' test suites, unmodified, against a
// real floe node: iceberg-go's REST catalog integration tests (build tag
// integration), which expect a catalog on localhost:8181 and an S3 server
// with the root account admin/password. It has no code of its own; see
// its tests.
package interop
