//! Building a `kube::Client` over the transport: kube's layers (base URI, authentication,
//! headers), the request counters, the `Retry-After` policy and the connection pool.

use kube::client::ConfigExt;
use tower::ServiceBuilder;

use crate::config::TransportConfig;
use crate::connect::Connector;
use crate::counters::Counters;
use crate::error::TransportError;
use crate::pool::{self, Transport};
use crate::retry;

/// A `kube::Client` over this transport (connections are opened on first use), and the
/// transport's handle. With a `proxy_url` in `config`, kube's default stack (HTTP/1.1) instead,
/// and no handle.
///
/// # Errors
/// [`TransportError::Stack`] when kube cannot build its layers or TLS configuration;
/// [`TransportError::Url`] / [`TransportError::ServerName`] for an unusable URL.
pub fn client(
    config: kube::Config,
    transport: TransportConfig,
) -> Result<(kube::Client, Option<Transport>), TransportError> {
    if config.proxy_url.is_some() {
        let client =
            kube::Client::try_from(config).map_err(|source| TransportError::Stack { source })?;
        return Ok((client, None));
    }
    let stack = |source| TransportError::Stack { source };
    let counters = Counters::new();
    let connector = Connector::new(&config, &transport, counters.clone())?;
    let pool = pool::Pool::new(connector, transport, config.read_timeout, counters.clone());
    let handle = Transport::new(pool.clone());
    // kube's own policy retries 15 times from 5 ms with the delay doubling up to 1,000 s, and
    // uses `Retry-After` only while its own delay is shorter: a request could wait minutes.
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(retry::ThrottleRetry::new(counters.clone())));
    // Outermost, so that each request is counted once, by the path kube gave it, before the
    // base URI is prepended and whatever the retries do.
    let service = ServiceBuilder::new()
        .layer(counters.layer())
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(stack)?)
        .layer(config.extra_headers_layer().map_err(stack)?)
        .service(pool::PoolService::new(pool));
    Ok((
        kube::Client::new(service, config.default_namespace.clone()),
        Some(handle),
    ))
}

/// [`client`], then one connection for short requests opened at once, so that
/// [`Transport::protocol`] can be logged at start-up. An unreachable server is not an error
/// here (requests fail and are retried later, as with kube's own client).
///
/// # Errors
/// As [`client`].
pub async fn connect(
    config: kube::Config,
    transport: TransportConfig,
) -> Result<(kube::Client, Option<Transport>), TransportError> {
    let (client, handle) = client(config, transport)?;
    if let Some(h) = &handle {
        h.warm_up().await;
    }
    Ok((client, handle))
}
