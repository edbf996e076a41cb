//! containerd's `containerd.services.events.v1.Events` over gRPC, in front of the
//! exchange: what turns an HTTP/2 request into a call on the hub (`super`, which
//! orders, appends and fans out) and the hub's answer back into gRPC.
//!
//! The listeners (`crate::gateway`) mount `EventsRoutes` (`routes.rs`), which
//! answers every path of the service itself; tonic's generated `EventsServer` is not
//! used, so nothing implements the generated `Events` trait.
//!
//! **Publish** and **Forward**, answered straight from the HTTP/2 request:
//! 1. `routes.rs`: `EventsRoutes::call` recognizes the path (`unary::Method::of`).
//! 2. `unary.rs`: `serve` → `answer` refuses a `grpc-encoding`, reads the one message
//!    within `exchange.limits.body_timeout` (`within_body_timeout`, `read_message`;
//!    `check_prefix` refuses compressed messages and ones over `max_request_bytes`),
//!    takes the connection's `Publisher` and decodes the request.
//! 3. `service.rs`: `publish` reads the `containerd-namespace` header; `publish` and
//!    `forward` run the call within `exchange.limits.request_timeout`
//!    (`within_timeout`) and map an `AcceptError` to its status.
//! 4. `../incoming.rs`, `../append.rs`: the call becomes an `Incoming::publish` or
//!    `Incoming::forward`; `Exchange::append` validates it (namespace, topic,
//!    Forward's timestamp, not the gateway's own namespace or topics,
//!    `max_event_bytes`) and appends it, and the call waits
//!    until `Appended::acknowledged` says it is durable.
//! 5. `unary.rs`: the answer is one empty message and `grpc-status: 0` (`Empty`), or
//!    the status, trailers only.
//!
//! **Subscribe**, one encoding of each event shared by every subscriber:
//! 1. `routes.rs`: `EventsRoutes::call` serves the path with tonic's `Grpc` and
//!    `SharedEnvelopeCodec`, reading the request within `body_timeout`.
//! 2. `service.rs`: `SubscribeMethod` (in `routes.rs`) calls `subscribe`:
//!    `compile_filters` checks the filters against `exchange.limits`
//!    (`../limits.rs`) and compiles them on the matching thread (`../matching.rs`),
//!    within `max_regex_memory`; `Exchange::subscribe` (`../mod.rs`) registers the
//!    subscriber.
//! 3. `subscription.rs`: the `Subscription` streams the events fan-out queued for the
//!    subscriber, then one `SubscriptionEnd` saying why it ended (its status).
//! 4. `routes.rs`: each event becomes its shared encoded envelope
//!    (`Event::encoded_envelope`), which `SharedEnvelopeCodec` writes as it is.

mod routes;
mod service;
mod subscription;
pub(crate) mod unary;

pub(crate) use service::{EventsService, NAMESPACE_HEADER, compile_filters};
pub(crate) use subscription::{Subscription, SubscriptionEnd};
