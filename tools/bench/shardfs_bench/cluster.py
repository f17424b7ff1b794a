# SPDX-License-Identifier: Apache-2.0
"""The test bed's NFS cluster, driven through shardfs-cluster: start (with the
fleet clients' network namespaces), the links' caps, the nodes' pids, a command
in the client namespace (or a fleet client's), stop.

Does not write data (data.py) or mount (mount.py). Threading: a Cluster is
started, capped and stopped by the main thread; exec_argv, ganesha_pids and
node_pids may be called from reader and sampler threads.
"""


from .common import ARGS, BenchError, CLUSTER, log, run


class Cluster:
    def __init__(self, cid, nodes, export, clients=0):
        self.id = cid
        self.nodes = nodes
        self.export = export
        self.clients = clients  # fleet clients (shardfs-cluster start --clients)
        self.started = False
        self.capped = False

    def start(self):
        log(f"starting cluster '{self.id}' ({self.nodes} nodes, export {self.export}"
            + (f", {self.clients} fleet clients" if self.clients else "") + ")")
        p = run([CLUSTER, "start", "--id", self.id, "--nodes", str(self.nodes),
                 "--export", self.export, "--force"]
                + (["--clients", str(self.clients)] if self.clients else []))
        self.started = True
        addrs = p.stdout.strip().splitlines()[-1].split(",")
        if len(addrs) != self.nodes:
            raise BenchError(f"cluster start printed {addrs!r}")
        self.addrs = addrs

    def cap(self, rate):
        run([CLUSTER, "cap", self.id, "all", rate])
        self.capped = rate != "off"

    def ganesha_pids(self):
        p = run([CLUSTER, "status", self.id])
        pids = []
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 3 and f[1].isdigit() and f[2] == "up":
                pids.append(int(f[1]))
        return pids

    def node_pids(self):
        """Node K's nfs-ganesha pid at [K - 1] (None where it is not up)."""
        p = run([CLUSTER, "status", self.id])
        pids = []
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 3:
                pids.append(int(f[1]) if f[1].isdigit() and f[2] == "up" else None)
        return pids

    def exec_argv(self, argv, client=None):
        """argv run in the client namespace, or in fleet client client's."""
        where = ["--client", str(client)] if client else []
        return [CLUSTER, "exec", self.id] + where + ["--"] + argv

    def stop(self):
        if self.started:
            if self.capped:
                run([CLUSTER, "cap", self.id, "all", "off"], check=False)
                self.capped = False
            if ARGS.keep:
                log(f"keeping cluster '{self.id}' (stop it with: {CLUSTER} stop {self.id})")
            else:
                run([CLUSTER, "stop", self.id], check=False)
            self.started = False
