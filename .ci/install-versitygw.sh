#!/usr/bin/env bash
# Installs versitygw, the S3-compatible server the S3 tests run against
# (internal/testenv), into ${FLOE_TOOLS:-$HOME/.cache/floe-tools}.
# Idempotent: does nothing when the binary is already there.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
tools="${FLOE_TOOLS:-$HOME/.cache/floe-tools}"
bin="$tools/versitygw"

if [[ -x "$bin" ]]; then
	echo "versitygw: $bin already installed; nothing to do"
	exit 0
fi

echo "versitygw: installing github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION into $tools"
mkdir -p "$tools"
GOBIN="$tools" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
echo "versitygw: installed $bin"
