package fsm

// The cluster's identity: a random id the first leader stamps once, so that
// a node can tell a member of its own cluster from a node of another one
// before it adds it (a mistyped address must not join two clusters' logs).
//
// TypeSetClusterID is ignorable: a replica that skips it has no identity to
// compare, as binaries before it had none.
const TypeSetClusterID CommandType = 50 | IgnorableFlag

var keyClusterID = []byte("cluster_id")

// maxClusterIDLen bounds the id a SetClusterID may store.
const maxClusterIDLen = 64

// SetClusterID stores ID as the cluster's identity unless one is stored
// already (the first to apply wins; later ones change nothing and report
// Count 0). The proposer chooses the id.
type SetClusterID struct {
	ID string `json:"id"`
}

func (SetClusterID) Type() CommandType { return TypeSetClusterID }

func (c SetClusterID) check() (Result, bool) {
	if c.ID == "" || len(c.ID) > maxClusterIDLen {
		return invalid("cluster id must be 1 to %d bytes", maxClusterIDLen)
	}
	return Result{}, false
}

func init() {
	register(TypeSetClusterID, registration{1, jsonCodec[SetClusterID](1), applySetClusterID})
}

func applySetClusterID(t *txn, c Command) Result {
	cmd := c.(SetClusterID)
	b := t.tx.Bucket(bucketRaft)
	if b.Get(keyClusterID) != nil {
		return Result{}
	}
	if err := b.Put(keyClusterID, []byte(cmd.ID)); err != nil {
		panic("fsm: put cluster id: " + err.Error())
	}
	return Result{Count: 1}
}

// ClusterID is the cluster's identity, "" until a leader has stamped it.
func (r *Reader) ClusterID() string {
	return string(r.tx.Bucket(bucketRaft).Get(keyClusterID))
}
