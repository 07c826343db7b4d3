#!/usr/bin/env bash
# Installs versitygw, the S3-compatible server the S3 tests and the
# benchmark run against (internal/harness finds it), into
# ${FLOE_TOOLS:-$HOME/.cache/floe-tools}.
# Idempotent: does nothing, and needs no Go toolchain, when the binary is
# already there or $FLOE_VERSITYGW names an executable one.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
tools="${FLOE_TOOLS:-$HOME/.cache/floe-tools}"
bin="$tools/versitygw"

if [[ -n "${FLOE_VERSITYGW:-}" ]]; then
	if [[ -x "$FLOE_VERSITYGW" && -f "$FLOE_VERSITYGW" ]]; then
		echo "versitygw: FLOE_VERSITYGW=$FLOE_VERSITYGW; nothing to do"
		exit 0
	fi
	echo "versitygw: FLOE_VERSITYGW=$FLOE_VERSITYGW is not an executable file" >&2
	exit 1
fi

if [[ -x "$bin" ]]; then
	echo "versitygw: $bin already installed; nothing to do"
	exit 0
fi

if ! command -v go >/dev/null; then
	echo "versitygw: $bin is missing and there is no go command to install it;" \
		"copy a versitygw $VERSITYGW_VERSION binary there or set FLOE_VERSITYGW" >&2
	exit 1
fi

echo "versitygw: installing github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION into $tools"
mkdir -p "$tools"
GOBIN="$tools" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
echo "versitygw: installed $bin"
