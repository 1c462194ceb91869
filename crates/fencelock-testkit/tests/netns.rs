//! The private network: a Redis server in a namespace of its own, partitioned by blackhole
//! routes and healed, and everything removed on drop. Needs CAP_NET_ADMIN; without it the
//! test checks that the error says so.

use std::time::Duration;

use fencelock_testkit::{cap_net_admin, PrivateNet, RedisServer};

fn namespaces() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_server_in_a_namespace_is_partitioned_and_healed() {
    let mut net = match PrivateNet::create() {
        Ok(net) => net,
        Err(e) => {
            assert!(!cap_net_admin() || e.to_string().contains("failed"), "{e}");
            eprintln!("skipped: {e}");
            return;
        }
    };
    let ns = net.add().unwrap();
    assert_eq!(ns.addr.octets()[3], 2);
    assert!(namespaces().contains(&ns.name));
    let server = RedisServer::builder().namespace(&ns).start().unwrap();
    assert_eq!(
        server.url(),
        format!("redis://{}:{}", ns.addr, server.port())
    );
    let ping = || RedisServer::command_via(server.addr(), &["PING"], Duration::from_millis(300));
    assert_eq!(ping().unwrap().text().as_deref(), Some("PONG"));

    net.partition(&ns).unwrap();
    assert!(ping().is_err());
    net.heal(&ns).unwrap();
    assert_eq!(ping().unwrap().text().as_deref(), Some("PONG"));

    let name = ns.name.clone();
    drop(server);
    drop(net);
    assert!(!namespaces().contains(&name));
}

#[test]
fn etcd_and_zookeeper_serve_from_a_namespace() {
    use fencelock_testkit::{EtcdServer, ZooKeeperServer};
    let Ok(mut net) = PrivateNet::create() else {
        return;
    };
    let ns = net.add().unwrap();
    let etcd = EtcdServer::start_in(&ns).unwrap();
    assert_eq!(etcd.url(), format!("etcd://{}:{}", ns.addr, etcd.port()));
    assert!(etcd.healthy());
    net.partition(&ns).unwrap();
    assert!(!etcd.healthy());
    net.heal(&ns).unwrap();
    assert!(etcd.healthy());

    let ns = net.add().unwrap();
    assert_eq!(ns.addr.octets()[3], 3);
    let zk = ZooKeeperServer::builder().namespace(&ns).start().unwrap();
    assert_eq!(zk.connect_string(), format!("{}:{}", ns.addr, zk.port()));
    assert_eq!(zk.mode().as_deref(), Some("standalone"));
}
