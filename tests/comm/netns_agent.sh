#!/bin/sh
# Open MPI's launcher agent for tests/comm/netns_hosts.sh (in place of ssh):
#   netns_agent.sh [ssh options] HOST COMMAND...
# runs COMMAND (Open MPI's daemon) on the test host HOST, an address listed in
# GPTX_NETNS_HOSTS ("ADDRESS=NAMESPACE=HOSTNAME ..."): inside that network
# namespace, with a host name of its own (a UTS namespace), as ssh would.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
for entry in $GPTX_NETNS_HOSTS; do
    addr=${entry%%=*} rest=${entry#*=}
    if [ "$addr" = "$host" ]; then
        exec ip netns exec "${rest%%=*}" unshare --uts /bin/sh -c "hostname ${rest#*=} && exec $*"
    fi
done
echo "netns_agent.sh: $host is not a test host ($GPTX_NETNS_HOSTS)" >&2
exit 255
