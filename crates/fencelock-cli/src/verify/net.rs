//! Network faults around one server: `partition` and `netem`. The server runs in a network
//! namespace of its own on a private bridge (the test kit's `PrivateNet`); a partition is
//! made of blackhole routes (never a link set down, which would send the private addresses
//! out by the default route), and a delay is `tc netem` when the kernel has it, else a
//! userspace delay in a `TcpProxy` that the clients reach the server through.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use fencelock_testkit::{Namespace, PrivateNet, TcpProxy};

/// How the host asks the faulted server whether it answers: a request in its own protocol
/// on a fresh connection, and a word its answer must contain.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    /// `PING` (inline), `+PONG`.
    Redis,
    /// The four-letter word `srvr`.
    ZooKeeper,
    /// `GET /health`.
    Etcd,
}

impl Probe {
    fn request(self) -> (&'static str, &'static [u8], &'static str) {
        match self {
            Probe::Redis => ("PING", b"PING\r\n", "+PONG"),
            Probe::ZooKeeper => ("srvr", b"srvr", "Zookeeper version"),
            Probe::Etcd => (
                "GET /health",
                b"GET /health HTTP/1.0\r\n\r\n",
                "\"health\":\"true\"",
            ),
        }
    }

    /// What the probe is called in the evidence.
    pub fn name(self) -> &'static str {
        self.request().0
    }
}

/// How a delay is put on the server's traffic.
pub enum Delay {
    /// `tc qdisc … netem delay` on the namespace's interface (the server's replies).
    Netem,
    /// Each chunk forwarded late by the proxy the clients go through, both ways.
    Proxy(TcpProxy),
}

/// The private network of a run and the one server its network faults hit.
pub struct Net {
    /// The bridge and namespaces (dropped after the servers: see `Deployment`).
    pub private: PrivateNet,
    /// The faulted server's namespace.
    pub ns: Namespace,
    /// The faulted server's address (in its namespace).
    pub server: SocketAddr,
    /// Which server, for the report (e.g. `redis-server 1 of 3`).
    pub label: String,
    /// How to ask it whether it answers.
    pub probe: Probe,
    /// How `netem` delays it (set only when `netem` runs).
    pub delay: Option<Delay>,
}

impl Net {
    /// Where the clients reach the faulted server: the proxy, or the server itself.
    pub fn client_addr(&self) -> SocketAddr {
        match &self.delay {
            Some(Delay::Proxy(p)) => SocketAddr::from(([127, 0, 0, 1], p.port())),
            _ => self.server,
        }
    }

    /// Chooses the delay mechanism for `netem`: `tc netem` if the kernel has it, else a
    /// proxy in front of the server. The reason if neither is possible.
    pub fn prepare_delay(&mut self) -> Result<(), String> {
        if self.private.netem_available(&self.ns) {
            self.delay = Some(Delay::Netem);
            return Ok(());
        }
        let proxy = TcpProxy::start_to(self.server)
            .map_err(|e| format!("no tc netem in this kernel, and no proxy: {e}"))?;
        self.delay = Some(Delay::Proxy(proxy));
        Ok(())
    }
}

/// One probe from the host on a fresh connection: its round trip, or why it failed.
fn ping(probe: Probe, addr: SocketAddr, timeout: Duration) -> Result<Duration, String> {
    let began = Instant::now();
    let (_, request, expect) = probe.request();
    let asked = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(request)?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        // Redis keeps the connection open: stop at the expected word.
        loop {
            let n = stream.read(&mut buf)?;
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if n == 0 || text.contains(expect) {
                return Ok(text.into_owned());
            }
        }
    };
    match asked() {
        Ok(text) if text.contains(expect) => Ok(began.elapsed()),
        Ok(text) => Err(format!(
            "answered {:?}",
            text.chars().take(80).collect::<String>()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The median of three probes' round trips.
fn rtt(probe: Probe, addr: SocketAddr) -> Result<Duration, String> {
    let mut all = (0..3)
        .map(|_| ping(probe, addr, Duration::from_secs(3)))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort();
    Ok(all[1])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

type Outcome = Result<(String, String), String>;

/// Cuts the server off from the host and the other servers for `span`, then heals; checks
/// that a probe from the host answered before, failed at the start and the end of the
/// partition, and answered again after the heal.
pub fn partition(net: &mut Net, span: Duration, lease: Duration) -> Outcome {
    let probe = Duration::from_millis(300);
    let before = ping(net.probe, net.server, probe)
        .map_err(|e| format!("no answer to the probe before: {e}"))?;
    let began = Instant::now();
    let made = net.private.partition(&net.ns);
    let early = ping(net.probe, net.server, probe);
    // The last probe ends the span (it fails at once on the host's blackhole route, or
    // after `probe` at most).
    std::thread::sleep(span.saturating_sub(began.elapsed()));
    let late = ping(net.probe, net.server, probe);
    let heal = net.private.heal(&net.ns);
    let cut = began.elapsed();
    made.map_err(|e| format!("partition: {e}"))?;
    heal.map_err(|e| format!("heal: {e}"))?;
    let healed = Instant::now();
    let after = loop {
        match ping(net.probe, net.server, probe) {
            Ok(_) => break healed.elapsed(),
            Err(e) if healed.elapsed() > Duration::from_secs(5) => {
                return Err(format!(
                    "no answer to the probe within 5 s of the heal: {e}"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let (early, late) = match (early, late) {
        (Err(a), Err(b)) => (a, b),
        (a, b) => {
            return Err(format!(
                "the probe answered during the partition: {a:?}, {b:?}"
            ))
        }
    };
    Ok((
        net.label.clone(),
        format!(
            "{} at {} (namespace {}) cut off by blackhole routes both ways for {:.2} s, past \
             the {:.1} s lease: a {} from the host answered before ({}), failed at the \
             start ({early}) and the end ({late}), and answered {} after the heal",
            net.label,
            net.server,
            net.ns.name,
            cut.as_secs_f64(),
            lease.as_secs_f64(),
            net.probe.name(),
            ms(before),
            ms(after),
        ),
    ))
}

/// Delays the server's traffic by `delay` for `span`; checks with probes on the clients' path
/// that the round trip grew by at least the delay while it lasted.
pub fn netem(net: &mut Net, delay: Duration, span: Duration) -> Outcome {
    let addr = net.client_addr();
    let before = rtt(net.probe, addr).map_err(|e| format!("no answer to the probe before: {e}"))?;
    let began = Instant::now();
    let (how, set) = match &net.delay {
        Some(Delay::Netem) => (
            format!("tc netem delay {} on the server's replies", ms(delay)),
            net.private
                .netem(&net.ns, Some(delay))
                .map_err(|e| e.to_string()),
        ),
        Some(Delay::Proxy(p)) => {
            p.set_latency(delay);
            let how = format!(
                "no sch_netem in this kernel: the proxy the clients use (127.0.0.1:{}) \
                 delayed each chunk by {} both ways",
                p.port(),
                ms(delay)
            );
            (how, Ok(()))
        }
        None => return Err("no delay mechanism was prepared".to_owned()),
    };
    let during = set.and_then(|()| rtt(net.probe, addr));
    std::thread::sleep(span.saturating_sub(began.elapsed()));
    match &net.delay {
        Some(Delay::Netem) => net
            .private
            .netem(&net.ns, None)
            .map_err(|e| e.to_string())?,
        Some(Delay::Proxy(p)) => p.set_latency(Duration::ZERO),
        None => {}
    }
    let lasted = began.elapsed();
    let during = during.map_err(|e| format!("{how}: {e}"))?;
    let after = rtt(net.probe, addr).map_err(|e| format!("no answer to the probe after: {e}"))?;
    if during < before + delay {
        return Err(format!(
            "{how}, but the {} round trip was {} (before {})",
            net.probe.name(),
            ms(during),
            ms(before)
        ));
    }
    Ok((
        net.label.clone(),
        format!(
            "{how} for {:.2} s: {} round trip {} before, {} during, {} after",
            lasted.as_secs_f64(),
            net.probe.name(),
            ms(before),
            ms(during),
            ms(after)
        ),
    ))
}
