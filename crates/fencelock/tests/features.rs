//! A build without a service's cargo feature refuses that service's URLs before any I/O, with
//! an input error that names the feature (README, "Cargo features"). CI runs this file in a
//! ZooKeeper-only and an etcd-only build; with every feature on there is nothing to refuse.

use fencelock::{Client, Error, InputError};

/// Each service's URL scheme, and whether this build has it.
const SERVICES: [(&str, &str, bool); 3] = [
    ("redis://127.0.0.1:1", "redis", cfg!(feature = "redis")),
    ("zk://127.0.0.1:1", "zookeeper", cfg!(feature = "zookeeper")),
    ("etcd://127.0.0.1:1", "etcd", cfg!(feature = "etcd")),
];

#[tokio::test]
async fn urls_of_services_left_out_are_refused_by_name() {
    for (url, feature, built) in SERVICES {
        if built {
            continue;
        }
        let result = tokio::time::timeout(std::time::Duration::from_secs(5), Client::connect(url))
            .await
            .expect("refused before any I/O");
        match result {
            Err(Error::InvalidInput(InputError::InvalidUrl { reason, .. })) => assert!(
                reason.contains(&format!("`{feature}`")),
                "{url}: the reason should name the feature: {reason}"
            ),
            other => panic!("{url} in a build without `{feature}`: {:?}", other.err()),
        }
    }
}

/// Without Redis, a URL of no known service is refused as such, not blamed on the feature.
#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn an_unknown_scheme_is_not_blamed_on_the_redis_feature() {
    for url in ["http://127.0.0.1:1", "ZK://127.0.0.1:1", ""] {
        match Client::connect(url).await {
            Err(Error::InvalidInput(InputError::InvalidUrl { reason, .. })) => {
                assert!(
                    reason.starts_with("not a URL of a lock service"),
                    "{url:?}: {reason}"
                )
            }
            other => panic!("{url:?}: {:?}", other.err()),
        }
    }
}

/// `services()` lists every service in a fixed order, says which this build has, and each
/// example URL is one of its own schemes.
#[test]
fn services_lists_every_service_and_what_this_build_has() {
    let listed: Vec<(&str, bool)> = fencelock::services()
        .iter()
        .map(|s| (s.name(), s.is_built()))
        .collect();
    let expected: Vec<(&str, bool)> = SERVICES.iter().map(|(_, f, b)| (*f, *b)).collect();
    assert_eq!(listed, expected);
    for service in fencelock::services() {
        let example = service.url_example();
        assert!(
            service.schemes().iter().any(|s| example.starts_with(s)),
            "{service:?}"
        );
        assert!(!service.url_form().is_empty(), "{service:?}");
    }
    let several: Vec<&str> = fencelock::services()
        .iter()
        .filter(|s| s.takes_several_urls())
        .map(|s| s.name())
        .collect();
    assert_eq!(several, ["redis"]);
}
