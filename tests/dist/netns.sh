#!/bin/sh
# netns.sh BUILD SOURCE MPIRUN — two hosts in all but hardware: two network
# namespaces on this machine joined by a veth pair (addresses 10.231.7.1 and
# .2 of their own), one rank in each, started by mpirun through a launch
# agent that enters the host's namespace (as ssh would log in), talking over
# Open MPI's TCP transport only (no shared memory). Runs
# tests/dist/netns_ranks.lua there (TAP). Needs root and `ip netns`; where
# either is missing it prints a TAP skip with the reason. mpirun is stopped
# after 90 s, and the namespaces are removed whatever happens.
build=$1 src=$2 mpirun=$3
skip() { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
tmp=$(mktemp -d) || skip "no temporary directory"
a=vna$$ b=vnb$$
cleanup() {
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! err=$(ip netns add "$a" 2>&1 && ip netns add "$b" 2>&1 &&
    ip link add "va$$" type veth peer name "vb$$" 2>&1 &&
    ip link set "va$$" netns "$a" 2>&1 && ip link set "vb$$" netns "$b" 2>&1 &&
    ip -n "$a" addr add 10.231.7.1/24 dev "va$$" 2>&1 &&
    ip -n "$b" addr add 10.231.7.2/24 dev "vb$$" 2>&1 &&
    ip -n "$a" link set "va$$" up 2>&1 && ip -n "$b" link set "vb$$" up 2>&1 &&
    ip -n "$a" link set lo up 2>&1 && ip -n "$b" link set lo up 2>&1); then
    skip "cannot make network namespaces here: $(echo "$err" | head -1)"
fi
# Open MPI starts its daemon on each host with "AGENT HOST COMMAND": here
# the command runs in that host's namespace.
cat >"$tmp/agent.sh" <<AGENT
#!/bin/sh
host=\$1
shift
case \$host in
10.231.7.1) ns=$a ;;
10.231.7.2) ns=$b ;;
*) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"
printf '10.231.7.1 slots=1\n10.231.7.2 slots=1\n' >"$tmp/hosts"
cd "$src" || exit 1
timeout 90 ip netns exec "$a" "$mpirun" -np 2 --hostfile "$tmp/hosts" \
    --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.231.7.0/24 --mca oob_tcp_if_include 10.231.7.0/24 \
    "$build/venom" "$src/tests/dist/netns_ranks.lua"
