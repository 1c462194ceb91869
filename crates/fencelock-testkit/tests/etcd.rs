//! The test kit's etcd: members start on free ports, keep their data across a restart, pause,
//! and a cluster elects a new leader when its leader is killed.

use std::time::{Duration, Instant};

use fencelock_testkit::{etcdctl, EtcdCluster, EtcdServer};

#[test]
fn a_member_restarts_with_its_data_and_pauses() {
    let mut server = EtcdServer::start().expect("start etcd");
    assert!(server.healthy());
    assert_eq!(server.url(), format!("etcd://127.0.0.1:{}", server.port()));
    etcdctl(&server.endpoints(), &["put", "k", "v"]).expect("put");
    server.restart().expect("restart");
    let got = etcdctl(&server.endpoints(), &["get", "k", "--print-value-only"]).expect("get");
    assert_eq!(got.trim(), "v");
    server.pause();
    assert!(!server.healthy(), "a paused member answers");
    server.resume();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.healthy() {
        assert!(Instant::now() < deadline, "not healthy after resume");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = server.pid().expect("running");
    server.kill();
    assert!(
        server.pid().is_none() && !server.healthy(),
        "pid {pid} still serves"
    );
}

#[test]
fn a_cluster_elects_a_new_leader_when_the_leader_dies() {
    let mut cluster = EtcdCluster::start().expect("start a cluster");
    assert_eq!(cluster.members().len(), EtcdCluster::SIZE);
    let leader = cluster.leader().expect("a leader");
    cluster.member_mut(leader).kill();
    let next = cluster
        .wait_for_leader(Duration::from_secs(30))
        .expect("a new leader");
    assert_ne!(next, leader);
    etcdctl(&cluster.endpoints(), &["put", "k", "v"]).expect("a put with two members");
}
