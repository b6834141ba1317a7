#!/usr/bin/env bash
# Prerequisites of the network-namespace system tests (tests/it/netns_harness.rs and the bridge
# tests built on tests::netns): root, iproute2 (`ip`, `tc`), and a shapable link, i.e. the
# kernel's netem qdisc or, failing that, TUN devices for the harness's userspace wire.
#
# Installs iproute2 if `ip` is missing, probes netem and tun in a throwaway namespace (which
# contains everything it creates and is deleted on exit), and prints what it found.
# Exits non-zero if the tests cannot run; LLBUS_REQUIRE_NETEM=1 also fails without netem.
set -euo pipefail

say() { printf 'netns prereqs: %s\n' "$*"; }
die() { printf '\nnetns prereqs: FAILED: %s\n\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "not root: run as root (CI runs as root; locally use sudo)"

if ! command -v ip >/dev/null 2>&1; then
    say "ip not found: installing iproute2"
    command -v apt-get >/dev/null 2>&1 || die "ip not found and no apt-get: install iproute2"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi
command -v ip >/dev/null 2>&1 || die "ip still not found after installing iproute2"
command -v tc >/dev/null 2>&1 || die "tc not found: install iproute2 (it provides tc)"
say "ip: $(command -v ip) ($(ip -V 2>&1))"
say "tc: $(command -v tc) ($(tc -V 2>&1))"

ns="llb-prereq-$$"
trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
ip netns add "$ns" || die "ip netns add failed (is CONFIG_NET_NS enabled? is /run/netns writable?)"
ip -n "$ns" link set lo up

netem=no
if ip -n "$ns" link add llb0 type veth peer name llb1 2>/dev/null; then
    say "veth: yes"
    if err=$(tc -n "$ns" qdisc replace dev llb0 root netem delay 1ms loss 1% duplicate 1% reorder 10% 2>&1); then
        netem=yes
        say "netem: yes ($(tc -n "$ns" qdisc show dev llb0 | head -1))"
    else
        say "netem: NO (tc said: ${err}) - the kernel lacks CONFIG_NET_SCH_NETEM / sch_netem"
    fi
else
    say "veth: NO (CONFIG_VETH missing?)"
fi

tun=no
if ip -n "$ns" tuntap add dev llbt0 mode tun 2>/dev/null; then
    tun=yes
    say "tun: yes (/dev/net/tun)"
else
    say "tun: NO (/dev/net/tun or CONFIG_TUN missing)"
fi

if [ "$netem" = yes ]; then
    say "OK: the harness will use veth + tc netem"
elif [ "${LLBUS_REQUIRE_NETEM:-0}" = 1 ]; then
    die "netem is required (LLBUS_REQUIRE_NETEM=1) but this kernel has no netem qdisc"
elif [ "$tun" = yes ]; then
    say "OK: no netem in this kernel; the harness will use its userspace tun wire (same loss/duplicate/reorder/delay semantics)"
else
    die "no shapable link: neither the netem qdisc nor tun devices work in this kernel"
fi
