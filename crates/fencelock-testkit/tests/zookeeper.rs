//! The test kit's ZooKeeper servers and its Curator harness, against real JVMs.
//!
//! Few tests on purpose: each starts JVMs, which are slow on a two-core machine. Every wait
//! is bounded, and nextest kills a test that runs past two minutes.

use std::time::{Duration, Instant};

use fencelock_testkit::zookeeper::{MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS};
use fencelock_testkit::{four_letter, CuratorLock, ZooKeeperEnsemble, ZooKeeperServer};
use zookeeper_client as zk;

const WAIT: Duration = Duration::from_secs(30);

/// Runs a blocking test-kit call (a wait for a Java process or a server) without stalling the
/// runtime: a ZooKeeper client's session needs its tasks to run to send pings, and its
/// connection counts as lost after 2/5 of the session timeout without an answer.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn connect(connect: &str, session: Duration) -> zk::Client {
    tokio::time::timeout(
        WAIT,
        zk::Client::connector()
            .with_session_timeout(session)
            .connect(connect),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// `<path>/_c_<36-char uuid>-lock-<10 digits>`: Curator's protected ephemeral sequential node.
fn assert_curator_node(node: &str, path: &str) -> u64 {
    let name = node
        .strip_prefix(path)
        .and_then(|n| n.strip_prefix('/'))
        .unwrap_or_else(|| panic!("{node} is not under {path}"));
    let rest = name.strip_prefix("_c_").expect("protected prefix _c_");
    let (uuid, seq) = rest.split_once("-lock-").expect("-lock- separator");
    assert_eq!(uuid.len(), 36, "uuid in {name}");
    assert_eq!(uuid.matches('-').count(), 4, "uuid in {name}");
    assert_eq!(seq.len(), 10, "sequence in {name}");
    seq.parse().expect("decimal sequence")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_serves_pauses_and_keeps_data_across_restart() {
    let started = Instant::now();
    let mut server = ZooKeeperServer::start().expect("start");
    eprintln!("standalone server serving after {:?}", started.elapsed());
    let port = server.port();
    assert!(![2181, 2888, 3888].contains(&port));
    assert_eq!(server.url(), format!("zk://127.0.0.1:{port}"));
    assert_eq!(four_letter(port, "ruok").unwrap(), "imok");
    assert_eq!(server.mode().as_deref(), Some("standalone"));

    // Sessions are granted between the configured bounds (a 400 ms session is not tried
    // here: on a busy machine it can expire before it is used).
    let conf = server.four_letter("conf").unwrap();
    assert!(
        conf.contains(&format!("minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n")),
        "{conf}"
    );
    assert!(
        conf.contains(&format!("maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n")),
        "{conf}"
    );
    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    client
        .create("/kept", b"across restarts", &persistent())
        .await
        .expect("create");
    drop(client);
    let long = connect(&server.connect_string(), Duration::from_secs(600)).await;
    assert_eq!(
        long.session_timeout().as_millis() as u64,
        MAX_SESSION_TIMEOUT_MS
    );
    drop(long);

    // Paused: the port still accepts, nothing answers.
    server.pause();
    assert!(server.four_letter("srvr").is_err());
    server.resume();
    assert_eq!(server.mode().as_deref(), Some("standalone"));

    // Killed: nothing listens; restarted: same port, data kept.
    let pid = server.pid();
    server.kill();
    assert_eq!(server.pid(), None);
    assert!(four_letter(port, "ruok").is_err());
    let restarted = Instant::now();
    server.restart().expect("restart");
    eprintln!(
        "standalone server serving again after {:?}",
        restarted.elapsed()
    );
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    let client = connect(&server.connect_string(), Duration::from_secs(2)).await;
    let (data, _) = client.get_data("/kept").await.expect("node kept");
    assert_eq!(data, b"across restarts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_elects_a_new_leader_when_the_leader_dies() {
    let started = Instant::now();
    let mut ensemble = ZooKeeperEnsemble::start().expect("start");
    eprintln!("ensemble serving after {:?}", started.elapsed());
    let ports: Vec<u16> = ensemble.members().iter().map(|m| m.port()).collect();
    assert_eq!(
        ensemble.url(),
        format!(
            "zk://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    );
    let leader = ensemble.leader().expect("a leader");
    let mut modes = ensemble.modes();
    modes.sort();
    assert_eq!(
        modes,
        [
            Some("follower".to_owned()),
            Some("follower".to_owned()),
            Some("leader".to_owned())
        ]
    );

    let client = connect(&ensemble.connect_string(), Duration::from_secs(4)).await;
    client
        .create("/replicated", b"v", &persistent())
        .await
        .expect("create");
    drop(client);

    ensemble.member_mut(leader).kill();
    let killed = Instant::now();
    let new_leader = ensemble.wait_for_leader(WAIT).expect("new leader");
    eprintln!("new leader after {:?}", killed.elapsed());
    assert_ne!(new_leader, leader);
    assert_eq!(ensemble.member(leader).mode(), None);

    // The survivors serve what the old leader committed.
    let survivor = ensemble.member(new_leader).connect_string();
    let client = connect(&survivor, Duration::from_secs(4)).await;
    assert_eq!(client.get_data("/replicated").await.expect("kept").0, b"v");
    drop(client);

    // The old leader comes back as a follower.
    ensemble.member_mut(leader).restart().expect("rejoin");
    assert_eq!(ensemble.member(leader).mode().as_deref(), Some("follower"));
    assert_eq!(ensemble.leader(), Some(new_leader));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_processes_exclude_each_other() {
    let server = ZooKeeperServer::start().expect("start");
    let connect_string = server.connect_string();
    let path = "/fencelock/curator";

    let started = Instant::now();
    let mut first = CuratorLock::spawn(&connect_string, path).expect("spawn");
    let first_node = blocking(|| first.wait_acquired(WAIT)).expect("first acquires");
    eprintln!("first Curator process holds after {:?}", started.elapsed());
    let first_seq = assert_curator_node(&first_node, path);

    // The node is the first process's own: ephemeral, owned by its session.
    let client = connect(&connect_string, Duration::from_secs(4)).await;
    let (_, stat) = client.get_data(&first_node).await.expect("lock node");
    assert_eq!(Some(stat.ephemeral_owner), first.session_id());

    // The second process queues behind it: its node exists, it does not hold.
    let mut second = blocking(|| {
        CuratorLock::builder(&connect_string, path)
            .session_timeout(Duration::from_secs(1))
            .spawn()
    })
    .expect("spawn");
    let deadline = Instant::now() + WAIT;
    let second_node = loop {
        let children = client.list_children(path).await.expect("children");
        if let Some(other) = children
            .iter()
            .map(|c| format!("{path}/{c}"))
            .find(|c| *c != first_node)
        {
            break other;
        }
        assert!(Instant::now() < deadline, "second process never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let second_seq = assert_curator_node(&second_node, path);
    assert!(second_seq > first_seq);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(second.acquired(), None, "second holds while first does");

    // A third waits behind the second.
    let third = blocking(|| CuratorLock::spawn(&connect_string, path)).expect("spawn");
    blocking(|| third.wait_line("CONNECTED", WAIT)).expect("third connects");

    blocking(|| first.release()).expect("first releases");
    let acquired = blocking(|| second.wait_acquired(WAIT)).expect("second acquires");
    assert_eq!(acquired, second_node);
    assert_eq!(third.acquired(), None, "third holds while second does");

    // A holder killed keeps the lock until the server expires its session (1 s).
    let killed = Instant::now();
    blocking(|| second.kill());
    let third_node = blocking(|| third.wait_acquired(WAIT)).expect("third acquires");
    let waited = killed.elapsed();
    eprintln!("third acquired {waited:?} after the holder was killed");
    assert!(assert_curator_node(&third_node, path) > second_seq);
    assert!(
        waited >= Duration::from_millis(500),
        "the node of a killed holder vanished before its session could expire ({waited:?})"
    );
    assert_eq!(client.check_stat(&second_node).await.expect("stat"), None);
}
