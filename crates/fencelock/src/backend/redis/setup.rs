//! How connections to a Redis server are configured: the connection manager's timeouts and
//! retries, and RESP3. A leaf, used by the nodes' connections and the sentinels' alike.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::ConnectionInfo;

use crate::options::ClientOptions;

/// The connection manager's configuration: every request bounded by the client's timeouts.
pub(crate) fn manager_config(options: &ClientOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout))
        // Reconnection is retried on the next request (or the next close); each request is
        // bounded in time.
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200))
}

/// The connection as RESP3. Besides the push messages a subscriber needs, this is what makes
/// a `ConnectionManager` replace a connection as soon as it is closed: redis-rs listens for
/// the disconnection only on RESP3 connections (`ConnectionManager::new_lazy_with_config`
/// sets its internal push sender only then; `check_for_disconnect_pushes` reconnects).
pub(crate) fn resp3(info: &ConnectionInfo) -> ConnectionInfo {
    info.clone().set_redis_settings(
        info.redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3),
    )
}
