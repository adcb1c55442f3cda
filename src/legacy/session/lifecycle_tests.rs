//! Goal: the stream lifecycle's counters and CONTRACT §4's invariants hold after every
//! transition. Method: a property-based state machine (to be written).
