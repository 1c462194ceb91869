//! The lock services as the CLI names them, from the library's registry
//! (`fencelock::services()`): their names, which one a URL names, and the URL help.

/// The URL used when neither `--url` nor `FENCELOCK_URL` gives one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// A service's name as its project spells it, from the library's registry name.
pub fn display_name(name: &str) -> &str {
    match name {
        "redis" => "Redis",
        "zookeeper" => "ZooKeeper",
        other => other,
    }
}

/// The service a URL names, by its scheme (the library's registry of services); Redis when
/// none answers it.
pub fn service(url: &str) -> &'static str {
    fencelock::services()
        .iter()
        .find(|s| s.schemes().iter().any(|scheme| url.starts_with(scheme)))
        .map_or("Redis", |s| display_name(s.name()))
}

/// How to choose another service or server: `check --url or FENCELOCK_URL (redis://, zk://
/// or etcd://)`, from the services this build has.
pub fn url_hint() -> String {
    let schemes: Vec<&str> = fencelock::services()
        .iter()
        .filter(|s| s.is_built())
        .filter_map(|s| s.schemes().first().copied())
        .collect();
    let list = match schemes.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => schemes.join(""),
    };
    format!("check --url or FENCELOCK_URL ({list})")
}

/// `--url`'s long help: the URL forms of every service this build has (the library's
/// registry), what the lease is on each, and RedLock.
pub fn url_help() -> String {
    let mut help = format!(
        "The service's URL [env: FENCELOCK_URL] [default: {}].",
        DEFAULT_URL
    );
    for service in fencelock::services().iter().filter(|s| s.is_built()) {
        let lease = match service.name() {
            "zookeeper" => " (the session timeout is the lease)",
            "etcd" => " (the client's lease TTL is the lease, in whole seconds)",
            _ => "",
        };
        help.push_str(&format!(
            "\n{}: {}{lease}",
            display_name(service.name()),
            service.url_form()
        ));
    }
    help.push_str(
        "\nGive --url several times (an odd number of redis:// URLs) for RedLock over \
         independent servers.",
    );
    help
}
