//! Input bridging: an upstream asks its caller for input and tasklift relays it. A
//! legacy upstream before the handle (`legacy`) and after it (`task`), a modern
//! upstream (`modern`), and the `requestState` tasklift seals, attacked (`state`).
//! Their shared helpers are in `support::input`.

mod legacy;
mod modern;
mod state;
mod task;
