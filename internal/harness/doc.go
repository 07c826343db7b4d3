// Package harness starts and stops the real processes that floe's tools
// (bench/, jepsen-lite/) and tests run against: floe nodes and versitygw.
//
// It owns:
//   - free loopback ports on any 127.0.0.x address (FreePort, FreePorts);
//   - child processes with a fixed command line (Process): start, restart
//     with the same flags and data directory, stop (the stop signal, then
//     SIGKILL), kill, pause (SIGSTOP/SIGCONT), exits nobody asked for, and a
//     log file per process that every start appends to after a marker line
//     naming the command line; on Linux the kernel kills a child whose
//     parent dies (Pdeathsig), so no child outlives a run;
//   - floe nodes and clusters of them on loopback (Node, Cluster): their
//     command lines, /readyz, /management/v1/cluster, leader agreement and
//     cluster health;
//   - versitygw, the S3-compatible server (StartVersitygw): finding the
//     binary, a fresh root directory, credentials, waiting until it
//     answers, one bucket;
//   - bounded waiting (Poll) and log reading (LogTail, LogContains).
//
// It knows nothing of what the tools measure or check, and nothing of
// testing.T: internal/testenv wraps it for tests. Fault injection (link
// proxies, an S3 proxy) belongs to the tool that injects the faults; the
// harness gives it the addresses to put a proxy in front of (ClusterIP,
// Advertise, Versitygw.NodeArgsVia). Every wait is bounded in time and in
// attempts; every function reports failure as an error and never exits.
package harness
