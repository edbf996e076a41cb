//! The `kafka` forwarder (being built).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{BuildError, Context, Forwarder, Kind, Options};

pub struct KafkaKind;

impl Kind for KafkaKind {
    fn check(&self, _options: &Options) -> Result<(), BuildError> {
        Ok(())
    }

    fn build<'a>(
        &'a self,
        _context: &'a Context,
        _options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async {
            Err(BuildError::Options(
                "the kafka forwarder is not built yet".into(),
            ))
        })
    }
}
