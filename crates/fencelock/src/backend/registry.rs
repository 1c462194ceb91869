//! The lock services fencelock knows, by URL scheme: one line per service, each with its
//! cargo feature. `Client::connect*` picks from it; [`services`] shows it to programs (the
//! CLI's lists and URL help). A service left out of the build keeps its line, without a
//! connect function, so that its URLs are refused by the name of the missing feature.

use super::{Connect, Connected, Connecting};
use crate::error::{Error, InputError};

/// A lock service fencelock knows, as [`services`] lists it: its name (the cargo feature that
/// builds it), the URL schemes it answers, a one-line URL form, an example URL, and whether
/// this build has it.
#[derive(Clone, Copy)]
pub struct ServiceInfo {
    name: &'static str,
    schemes: &'static [&'static str],
    url_form: &'static str,
    url_example: &'static str,
    several_urls: bool,
    connect: Option<Connect>,
}

impl std::fmt::Debug for ServiceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceInfo")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("url_form", &self.url_form)
            .field("url_example", &self.url_example)
            .field("several_urls", &self.several_urls)
            .field("built", &self.is_built())
            .finish()
    }
}

impl ServiceInfo {
    /// The service's name, which is also its cargo feature: `redis`, `zookeeper`, `etcd`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The URL schemes it answers, with their `://` (`zk://`).
    pub fn schemes(&self) -> &'static [&'static str] {
        self.schemes
    }

    /// The URL forms it takes, in one line (`zk://host:port[,host:port...][/base/path]`).
    pub fn url_form(&self) -> &'static str {
        self.url_form
    }

    /// A URL of a local server on the service's usual port (`zk://127.0.0.1:2181`).
    pub fn url_example(&self) -> &'static str {
        self.url_example
    }

    /// Whether [`crate::Client::connect_all`] takes several URLs of it (RedLock).
    pub fn takes_several_urls(&self) -> bool {
        self.several_urls
    }

    /// Whether this build has the service (its cargo feature was on).
    pub fn is_built(&self) -> bool {
        self.connect.is_some()
    }

    /// Whether `url` is one of this service's.
    fn answers(&self, url: &str) -> bool {
        self.schemes.iter().any(|s| url.starts_with(s))
    }
}

/// `Some(connect)` when the cargo feature is on, else `None`.
macro_rules! built {
    ($feature:literal, $connect:path) => {{
        #[cfg(feature = $feature)]
        let connect: Option<Connect> = Some($connect);
        #[cfg(not(feature = $feature))]
        let connect: Option<Connect> = None;
        connect
    }};
}

/// Every service: one line each. A new service adds its line here.
static SERVICES: &[ServiceInfo] = &[
    ServiceInfo {
        name: "redis",
        schemes: &["redis://", "redis+cluster://", "redis+sentinel://"],
        url_form: "redis://[:password@]host:port[/db], redis+cluster://host:port,..., \
                   redis+sentinel://host:port,.../master[/db]",
        url_example: "redis://127.0.0.1:6379",
        several_urls: true,
        connect: built!("redis", super::redis::connect),
    },
    ServiceInfo {
        name: "zookeeper",
        schemes: &["zk://"],
        url_form: "zk://host:port[,host:port...][/base/path]",
        url_example: "zk://127.0.0.1:2181",
        several_urls: false,
        connect: built!("zookeeper", super::zookeeper::connect),
    },
    ServiceInfo {
        name: "etcd",
        schemes: &["etcd://"],
        url_form: "etcd://[user[:password]@]host:port[,host:port...][/prefix]",
        url_example: "etcd://127.0.0.1:2379",
        several_urls: false,
        connect: built!("etcd", super::etcd::connect),
    },
];

/// The lock services fencelock knows, built into this binary or not, in a fixed order:
/// for lists of services and URL help.
///
/// ```
/// for service in fencelock::services().iter().filter(|s| s.is_built()) {
///     println!("{}: {}", service.name(), service.url_form());
/// }
/// ```
pub fn services() -> &'static [ServiceInfo] {
    SERVICES
}

/// Picks the service by the URLs' scheme and connects it.
pub(crate) async fn connect(connecting: Connecting<'_>) -> Result<Connected, Error> {
    let urls = connecting.urls;
    let service = pick(urls)?;
    let Some(connect) = service.connect else {
        return Err(invalid(
            connecting.url(),
            format!(
                "fencelock was built without its `{}` cargo feature, which this URL needs",
                service.name
            ),
        ));
    };
    if urls.len() > 1 && !service.several_urls {
        let several: Vec<&str> = SERVICES
            .iter()
            .filter(|s| s.several_urls)
            .map(|s| s.name)
            .collect();
        return Err(invalid(
            &urls.join(" "),
            format!(
                "{} takes one URL that lists its servers, comma-separated; several URLs are \
                 for {} only",
                service.name,
                several.join(", ")
            ),
        ));
    }
    connect(connecting).await
}

/// The one service every URL belongs to.
fn pick(urls: &[&str]) -> Result<&'static ServiceInfo, Error> {
    let Some(first) = urls.first() else {
        return Err(InputError::InvalidOption {
            option: "urls",
            reason: "no server URL was given",
        }
        .into());
    };
    let service = SERVICES.iter().find(|s| s.answers(first)).ok_or_else(|| {
        let built: Vec<&str> = SERVICES
            .iter()
            .filter(|s| s.is_built())
            .flat_map(|s| s.schemes.iter().copied())
            .collect();
        invalid(
            first,
            format!(
                "not a URL of a lock service this build has ({})",
                built.join(", ")
            ),
        )
    })?;
    if let Some(other) = urls.iter().find(|u| !service.answers(u)) {
        return Err(invalid(
            other,
            format!(
                "all URLs of one client must be of one service ({})",
                service.name
            ),
        ));
    }
    Ok(service)
}

fn invalid(url: &str, reason: String) -> Error {
    let redacted: Vec<String> = url.split(' ').map(crate::redact_url).collect();
    InputError::InvalidUrl {
        url: redacted.join(" "),
        reason,
    }
    .into()
}
