//! What the worker connects to: one Redis, or (feature `cluster`) a Redis
//! Cluster, whose connection routes each step to the node of its key's
//! hash slot (a key's `:log` and `:st` share the hash tag `{<pace key>}`,
//! so one step touches one node).

use std::time::Duration;

use redis::ConnectionLike;

/// A Redis to connect to.
pub(crate) enum Backend {
    Single(redis::Client),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster::ClusterClient),
}

/// A connection made by a [`Backend`].
pub(crate) enum Conn {
    Single(redis::Connection),
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Backend {
    /// A connection, each call on it bounded by `timeout` (connect, read,
    /// write).
    pub(crate) fn connect(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Backend::Single(client) => {
                let c = client.get_connection_with_timeout(timeout)?;
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))?;
                Ok(Conn::Single(c))
            }
            // The client was built with the timeout (see `cluster`).
            #[cfg(feature = "cluster")]
            Backend::Cluster(client) => Ok(Conn::Cluster(Box::new(client.get_connection()?))),
        }
    }
}

impl Conn {
    pub(crate) fn as_dyn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => &mut **c,
        }
    }
}

/// A cluster client on `nodes` (`redis://host:port`, any of the cluster's
/// nodes), every connect and answer bounded by `timeout`, without retries
/// of its own (a failed step is the fleet's to handle: it paces locally).
#[cfg(feature = "cluster")]
pub(crate) fn cluster(nodes: &[&str], timeout: Duration) -> redis::RedisResult<Backend> {
    redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(0)
        .build()
        .map(Backend::Cluster)
}
