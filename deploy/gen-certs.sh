#!/usr/bin/env bash
# deploy/gen-certs.sh DIR [HOST...] — write a throwaway CA and one certificate
# per node for mutual TLS on the cluster port, for trying TLS out locally:
#
#   DIR/ca.pem, DIR/ca-key.pem         the CA (--tls-ca ca.pem)
#   DIR/nodeN.pem, DIR/nodeN-key.pem   node1..node3 (--tls-cert, --tls-key)
#
# Every node certificate carries the serverAuth and clientAuth extended key
# usages (floe presents the same certificate when accepting and dialling)
# and SANs for the hosts peers dial: by default IP 127.0.0.1 and DNS
# localhost; pass HOSTs to use others (IPs and DNS names both work). The
# keys are unencrypted and valid for 30 days. Needs openssl.
#
#   deploy/gen-certs.sh floe-cluster/tls
#   FLOE_CLUSTER_TLS_DIR=floe-cluster/tls make cluster
set -euo pipefail

if (($# < 1)); then
	echo "usage: $0 DIR [HOST...]" >&2
	exit 2
fi
dir=$1
shift
hosts=("$@")
((${#hosts[@]} > 0)) || hosts=(127.0.0.1 localhost)
command -v openssl >/dev/null || {
	echo "gen-certs.sh: openssl is required" >&2
	exit 2
}

san=""
for h in "${hosts[@]}"; do
	if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then
		san+="${san:+,}IP:$h"
	else
		san+="${san:+,}DNS:$h"
	fi
done

mkdir -p "$dir"
cd "$dir"
umask 077

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
	-subj "/CN=floe test CA" \
	-addext "basicConstraints=critical,CA:TRUE" \
	-addext "keyUsage=critical,keyCertSign,cRLSign" \
	-keyout ca-key.pem -out ca.pem 2>/dev/null

ext=$(mktemp)
trap 'rm -f "$ext" node*.csr ca.srl' EXIT
cat >"$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
EOF

for n in 1 2 3; do
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "/CN=node$n" -keyout "node$n-key.pem" -out "node$n.csr" 2>/dev/null
	openssl x509 -req -in "node$n.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
		-days 30 -extfile "$ext" -out "node$n.pem" 2>/dev/null
done
chmod 644 ca.pem node1.pem node2.pem node3.pem
echo "wrote ca.pem and node1..3 certificates (SAN $san) to $(pwd)"
