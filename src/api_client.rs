//! [`ApiClient`]: the agent's `kube::Client` with the counters of the transport under it.

use nodelet_transport::{Counters, Transport};

/// A `kube::Client` and, when it runs over `nodelet-transport`, that transport's [`Counters`]:
/// `/metrics` reports its requests by verb, retried requests and open connections from them.
/// A plain `kube::Client` converts into one without counters (those metrics then stay empty).
#[derive(Clone)]
pub struct ApiClient {
    /// The client every request of the agent goes through.
    pub client: kube::Client,
    /// The counters of the transport under `client`, if it is one of `nodelet-transport`'s.
    pub counters: Option<Counters>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("counted", &self.counters.is_some())
            .finish_non_exhaustive()
    }
}

impl From<kube::Client> for ApiClient {
    fn from(client: kube::Client) -> Self {
        ApiClient {
            client,
            counters: None,
        }
    }
}

impl From<(kube::Client, Option<Transport>)> for ApiClient {
    /// What `nodelet_transport::client` / `connect` return.
    fn from((client, transport): (kube::Client, Option<Transport>)) -> Self {
        ApiClient {
            client,
            counters: transport.map(|t| t.counters()),
        }
    }
}
