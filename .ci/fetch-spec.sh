#!/usr/bin/env bash
# Downloads the Iceberg REST OpenAPI spec floe implements, at the pinned
# apache/iceberg revision, into ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/spec/,
# and checks its SHA-256: the spec-validation tests find it there (after
# FLOE_SPEC and ../shared/spec/). Idempotent: does nothing when the file is
# already there with the right digest.
set -euo pipefail

# Keep in step with internal/spectest/spec.go (PinnedRevision, PinnedSHA256).
REVISION=0e7a36d48ff83792bfeb72eaff2dd2d7fae60eb3
SHA256=9a160d49002a14e559ab4dcb5be9953b8880ca1544cf9773f05b1a720c3b35b7
URL="https://raw.githubusercontent.com/apache/iceberg/$REVISION/open-api/rest-catalog-open-api.yaml"

dir="${FLOE_TOOLS:-$HOME/.cache/floe-tools}/spec"
file="$dir/rest-catalog-open-api-$REVISION.yaml"

check() { [[ "$(sha256sum "$1" | awk '{print $1}')" == "$SHA256" ]]; }

if [[ -f "$file" ]] && check "$file"; then
	echo "spec: $file already there; nothing to do"
	exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp "$dir/.download.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
echo "spec: downloading $URL"
if ! curl -fsSL --retry 3 -o "$tmp" "$URL"; then
	echo "spec: download failed; put the file at $file yourself, or set FLOE_SPEC" >&2
	exit 1
fi
if ! check "$tmp"; then
	echo "spec: $URL does not have SHA-256 $SHA256; refusing it" >&2
	exit 1
fi
mv "$tmp" "$file"
trap - EXIT
echo "spec: $file"
