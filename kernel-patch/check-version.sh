#!/bin/sh
# Fail unless VERSION, dkms.conf's PACKAGE_VERSION and (when built) the
# module's MODULE_VERSION all say the same. VERSION is the source of truth.
set -eu
cd "$(dirname "$0")"

version=$(tr -d ' \t\r\n' < VERSION)
dkms_version=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' dkms.conf)
status=0

if [ -z "$version" ]; then
	echo "check-version: VERSION is empty" >&2
	exit 1
fi
if [ "$dkms_version" != "$version" ]; then
	echo "check-version: dkms.conf PACKAGE_VERSION=\"$dkms_version\" but VERSION says \"$version\"" >&2
	status=1
fi
if [ -f tcp_westwood_tb.ko ] && command -v modinfo >/dev/null 2>&1; then
	ko_version=$(modinfo -F version ./tcp_westwood_tb.ko)
	if [ "$ko_version" != "$version" ]; then
		echo "check-version: tcp_westwood_tb.ko has version \"$ko_version\" but VERSION says \"$version\" (rebuild)" >&2
		status=1
	fi
fi
[ "$status" -eq 0 ] && echo "check-version: $version"
exit "$status"
