// Package transport carries all node-to-node traffic of a floe cluster over
// one TCP port per node: hashicorp/raft's replication stream and floe's own
// internal RPC (write forwarding, ReadIndex confirmation, purge coordination).
//
// # Protocol selection
//
// Every inbound connection starts, after the TLS handshake when TLS is
// configured, with one protocol byte: [ProtoRaft] or [ProtoRPC]. Raft
// connections are handed, with the byte consumed, to the [raft.StreamLayer]
// returned by [Mux.RaftLayer]; wrap it with raft.NewNetworkTransport. RPC
// connections are answered with one acknowledgement byte and then served by
// the [Handler] given to [Mux.Serve]. Anything else is closed and counted.
//
// # RPC
//
// Frames are a uint32 big-endian length followed by that many bytes (at most
// [MaxFrameSize]). A request carries a request id, the caller's absolute
// deadline and a method name; a response carries the id, an optional
// [RemoteError] and a body. A connection carries one request at a time; the
// [Client] pools connections per address for concurrency.
//
// # Deadlines
//
// The caller's context deadline travels as an absolute wall-clock time (Unix
// nanoseconds). The handler runs under that deadline as the server's clock
// reads it, but never under less than 5 seconds nor more than 2 minutes from
// the request's arrival: clocks that disagree (a broken NTP) neither starve a
// handler (a deadline that looks past on arrival) nor let a caller hold one
// for as long as its clock is off. The caller stops waiting at its own
// deadline whatever the handler does.
//
// # Retry contract
//
// [Client.Call] resends a request on another connection only when the
// request certainly never reached a handler: the dial (TCP connect, TLS
// handshake, protocol acknowledgement) failed, or writing the request to a
// pooled, previously used connection failed. The final attempt always dials a
// fresh connection. Once a request has been written completely, any failure
// — EOF or reset while reading the response, a timeout, a cancelled context,
// a malformed response — is returned wrapping [ErrOutcomeUnknown] and is
// never retried, because the handler may have run and had effects. Callers
// that need at-most-once effects across such failures must make the
// operation idempotent themselves (floe uses Raft-level idempotency records).
//
// # TLS
//
// With [TLSFiles] set, both directions use mutual TLS 1.3 against one CA:
// servers require and verify client certificates, clients verify the server
// certificate (including that it names the dialled host) and present their
// own. Node certificates therefore need both the serverAuth and clientAuth
// extended key usages and a SAN for the advertised host.
package transport
