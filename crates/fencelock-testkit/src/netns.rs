//! A private network for throwaway servers: a bridge on the host and, per server, a network
//! namespace plugged into it by a veth pair, so that one server can be partitioned or delayed
//! without touching the others or the host's loopback.
//!
//! Safety: traffic may go only to loopback or to these namespaces. The namespaces have no
//! default route, and the host keeps a blackhole route for the whole private /24 (behind the
//! bridge's connected route), so that even if the bridge's route went away, nothing for the
//! private addresses would leave by the host's default route. A partition is made of
//! blackhole /32 routes only; a link is never set down (setting the host side of a veth down
//! removes the connected route, and packets then follow the default route to the real
//! network).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::find_program;

/// The metric of the host's safety blackhole for the private /24: above the bridge's
/// connected route (metric 0), so it only catches traffic if that route is gone.
const SAFETY_METRIC: &str = "4242";

/// Names are unique per process: the PID plus this counter.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Why a private network cannot be made (or changed) here. Its text is the reason a fault
/// that needs one is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetnsError(pub String);

impl std::fmt::Display for NetnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetnsError {}

/// One server's place in a [`PrivateNet`]: its namespace and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// The namespace's name (`ip netns exec NAME …`).
    pub name: String,
    /// Its address on the private network.
    pub addr: Ipv4Addr,
    /// The `ip` program.
    ip: PathBuf,
}

impl Namespace {
    /// A command that runs `program` inside the namespace (`ip netns exec NAME program`).
    /// `ip netns exec` executes the program in its own process, so the child's PID is the
    /// program's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(&self.ip);
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

/// One member: the namespace and the host-side veth end.
#[derive(Debug)]
struct Member {
    ns: Namespace,
    veth: String,
}

/// A private /24 behind a bridge of the host, with one namespace per server. Everything it
/// created (namespaces, veths, the bridge, routes) is removed, by name, when it drops; the
/// servers inside must be stopped first (drop them before this).
#[derive(Debug)]
pub struct PrivateNet {
    ip: PathBuf,
    tag: String,
    bridge: Option<String>,
    prefix: [u8; 3],
    safety_route: bool,
    members: Vec<Member>,
    /// The host's blackhole /32 routes now in place (partitions).
    host_blackholes: Vec<Ipv4Addr>,
}

impl PrivateNet {
    /// Creates the bridge with the first free private /24 of 10.230.0.0/15–10.239.255.0/24
    /// (one no route of the host overlaps). Fails with the reason if this process lacks
    /// CAP_NET_ADMIN or `ip` cannot create a namespace.
    pub fn create() -> Result<Self, NetnsError> {
        if !cap_net_admin() {
            return Err(NetnsError(
                "CAP_NET_ADMIN is missing here: network namespaces cannot be created".into(),
            ));
        }
        let ip = find_program("ip", "FENCELOCK_IP").ok_or_else(|| {
            NetnsError("`ip` (iproute2) is not installed: apt-get install iproute2".into())
        })?;
        let mut last = NetnsError("no attempt".into());
        // Another process may take the same /24 between our look and our route: try again
        // with the next free one (the safety route's `add` fails on a taken one).
        for _ in 0..5 {
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let tag = format!("{}x{n}", std::process::id());
            let prefix = free_prefix(&ip, std::process::id().wrapping_add(n * 7919))?;
            let mut net = Self {
                ip: ip.clone(),
                tag,
                bridge: None,
                prefix,
                safety_route: false,
                members: Vec::new(),
                host_blackholes: Vec::new(),
            };
            match net.make_bridge() {
                Ok(()) => return Ok(net),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn make_bridge(&mut self) -> Result<(), NetnsError> {
        // The safety route first, so that there is never a moment without it.
        self.ip(&[
            "route",
            "add",
            "blackhole",
            &self.subnet(),
            "metric",
            SAFETY_METRIC,
        ])?;
        self.safety_route = true;
        let bridge = format!("flb{}", self.tag);
        self.ip(&["link", "add", &bridge, "type", "bridge"])?;
        self.bridge = Some(bridge.clone());
        let host = format!("{}/24", self.host_addr());
        self.ip(&["addr", "add", &host, "dev", &bridge])?;
        self.ip(&["link", "set", &bridge, "up"])
    }

    /// The private network, e.g. `10.231.7.0/24`.
    pub fn subnet(&self) -> String {
        let [a, b, c] = self.prefix;
        format!("{a}.{b}.{c}.0/24")
    }

    /// The host's address on the bridge (`.1`).
    pub fn host_addr(&self) -> Ipv4Addr {
        let [a, b, c] = self.prefix;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// The members so far.
    pub fn members(&self) -> Vec<Namespace> {
        self.members.iter().map(|m| m.ns.clone()).collect()
    }

    /// Adds a namespace with `lo` up and a veth into the bridge, at the next address (`.2`,
    /// `.3`, …). Fails with the reason (e.g. `ip netns add` refused).
    pub fn add(&mut self) -> Result<Namespace, NetnsError> {
        let i = self.members.len();
        let bridge = self
            .bridge
            .clone()
            .ok_or_else(|| NetnsError("no bridge".into()))?;
        let [a, b, c] = self.prefix;
        let addr = Ipv4Addr::new(a, b, c, 2 + i as u8);
        let ns = Namespace {
            name: format!("fencelock-{}-{i}", self.tag),
            addr,
            ip: self.ip.clone(),
        };
        let veth = format!("flv{}v{i}", self.tag);
        self.ip(&["netns", "add", &ns.name])?;
        self.members.push(Member {
            ns: ns.clone(),
            veth: veth.clone(),
        });
        // The peer is created inside the namespace at once: `eth0` is taken on the host.
        let peer = ["peer", "name", "eth0", "netns", &ns.name];
        self.ip(&[&["link", "add", &veth, "type", "veth"][..], &peer[..]].concat())?;
        self.ip(&["link", "set", &veth, "master", &bridge, "up"])?;
        let cidr = format!("{addr}/24");
        self.ip_in(&ns.name, &["addr", "add", &cidr, "dev", "eth0"])?;
        self.ip_in(&ns.name, &["link", "set", "eth0", "up"])?;
        self.ip_in(&ns.name, &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Cuts `member` off from the host and every other member, both ways, with blackhole
    /// routes only: inside its namespace to every other address, and to its address on the
    /// host and in the other namespaces. No link goes down; the connected routes stay.
    pub fn partition(&mut self, member: &Namespace) -> Result<(), NetnsError> {
        self.partition_routes(member, "add")
    }

    /// Undoes [`partition`](Self::partition).
    pub fn heal(&mut self, member: &Namespace) -> Result<(), NetnsError> {
        self.partition_routes(member, "del")
    }

    fn partition_routes(&mut self, member: &Namespace, verb: &str) -> Result<(), NetnsError> {
        let me = format!("{}/32", member.addr);
        let mut first_error = None;
        let mut note = |r: Result<(), NetnsError>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        };
        let host = format!("{}/32", self.host_addr());
        note(self.ip_in(&member.name, &["route", verb, "blackhole", &host]));
        for other in self.members.iter().filter(|m| m.ns.name != member.name) {
            let them = format!("{}/32", other.ns.addr);
            note(self.ip_in(&member.name, &["route", verb, "blackhole", &them]));
            note(self.ip_in(&other.ns.name, &["route", verb, "blackhole", &me]));
        }
        note(self.ip(&["route", verb, "blackhole", &me]));
        if verb == "add" {
            self.host_blackholes.push(member.addr);
        } else {
            self.host_blackholes.retain(|a| *a != member.addr);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether the kernel has `sch_netem` (tried in `member`'s namespace: a zero delay is
    /// added and removed).
    pub fn netem_available(&self, member: &Namespace) -> bool {
        let ok = self.netem(member, Some(Duration::ZERO)).is_ok();
        if ok {
            let _ = self.netem(member, None);
        }
        ok
    }

    /// Delays every packet `member` sends by `delay` (`tc qdisc … netem delay`), or removes
    /// the delay (`None`).
    pub fn netem(&self, member: &Namespace, delay: Option<Duration>) -> Result<(), NetnsError> {
        let tc = find_program("tc", "FENCELOCK_TC")
            .ok_or_else(|| NetnsError("`tc` (iproute2) is not installed".into()))?;
        let mut c = Command::new(tc);
        c.args(["-n", &member.name, "qdisc"]);
        match delay {
            Some(d) => c
                .args(["replace", "dev", "eth0", "root", "netem", "delay"])
                .arg(format!("{}us", d.as_micros())),
            None => c.args(["del", "dev", "eth0", "root"]),
        };
        run(c)
    }

    fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        let mut c = Command::new(&self.ip);
        c.args(args);
        run(c)
    }

    fn ip_in(&self, ns: &str, args: &[&str]) -> Result<(), NetnsError> {
        let mut c = Command::new(&self.ip);
        c.args(["-n", ns]).args(args);
        run(c)
    }
}

impl Drop for PrivateNet {
    fn drop(&mut self) {
        // Only what this handle created, by name; errors are ignored (already gone).
        for addr in std::mem::take(&mut self.host_blackholes) {
            let _ = self.ip(&["route", "del", "blackhole", &format!("{addr}/32")]);
        }
        for m in std::mem::take(&mut self.members) {
            let _ = self.ip(&["link", "del", &m.veth]);
            let _ = self.ip(&["netns", "del", &m.ns.name]);
        }
        if let Some(bridge) = self.bridge.take() {
            let _ = self.ip(&["link", "del", &bridge]);
        }
        if self.safety_route {
            let subnet = self.subnet();
            let _ = self.ip(&[
                "route",
                "del",
                "blackhole",
                &subnet,
                "metric",
                SAFETY_METRIC,
            ]);
        }
    }
}

/// Runs a command; its error output is the error.
fn run(mut c: Command) -> Result<(), NetnsError> {
    let shown = format!("{c:?}").replace('"', "");
    let out = c
        .output()
        .map_err(|e| NetnsError(format!("{shown}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(NetnsError(format!("{shown} failed: {err}")))
}

/// Whether this process has CAP_NET_ADMIN (bit 12 of its effective capabilities).
pub fn cap_net_admin() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 12) != 0)
}

/// The first /24 of 10.230.0.0–10.239.255.0, from `seed` on, that no route of the host
/// (any table) overlaps.
fn free_prefix(ip: &PathBuf, seed: u32) -> Result<[u8; 3], NetnsError> {
    let out = Command::new(ip)
        .args(["-4", "-o", "route", "show", "table", "all"])
        .output()
        .map_err(|e| NetnsError(format!("ip route: {e}")))?;
    let taken: Vec<(u32, u32)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(route_prefix)
        .filter(|&(_, len)| len > 0)
        .map(|(net, len)| (net, u32::MAX.checked_shl(32 - len).unwrap_or(0)))
        .collect();
    (0..2560u32)
        .map(|k| (seed.wrapping_add(k)) % 2560)
        .map(|k| [10, 230 + (k / 256) as u8, (k % 256) as u8])
        .find(|&[a, b, c]| {
            let ours = u32::from(Ipv4Addr::new(a, b, c, 0));
            // Two prefixes overlap when either contains the other's network address.
            taken
                .iter()
                .all(|&(net, mask)| (ours & mask) != (net & mask) && (net & 0xffff_ff00) != ours)
        })
        .ok_or_else(|| NetnsError("no free /24 in 10.230.0.0–10.239.255.0".into()))
}

/// The destination of one `ip -o route` line as (network, prefix length); `default` is 0/0.
fn route_prefix(line: &str) -> Option<(u32, u32)> {
    let kinds = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "blackhole",
        "unreachable",
        "prohibit",
        "throw",
        "nat",
        "anycast",
    ];
    let mut words = line.split_whitespace();
    let mut dest = words.next()?;
    if kinds.contains(&dest) {
        dest = words.next()?;
    }
    if dest == "default" {
        return Some((0, 0));
    }
    let (addr, len) = dest.split_once('/').unwrap_or((dest, "32"));
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((u32::from(addr), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_lines_give_their_prefix() {
        assert_eq!(route_prefix("default via 192.0.2.1 dev eth0"), Some((0, 0)));
        let p = route_prefix("blackhole 10.231.7.0/24 metric 4242").unwrap();
        assert_eq!(p, (u32::from(Ipv4Addr::new(10, 231, 7, 0)), 24));
        let p = route_prefix("local 127.0.0.1 dev lo table local proto kernel").unwrap();
        assert_eq!(p, (u32::from(Ipv4Addr::LOCALHOST), 32));
        assert_eq!(route_prefix("garbage"), None);
    }
}
