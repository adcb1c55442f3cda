//! Unit tests of `Peer` over an in-memory transport: answers, progress by token, requests
//! from the upstream routed to the running call, cancellation on drop, the upstream's end.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use serde_json::json;

use super::{Peer, PeerEvents, Transport, SPARE_SLOTS_MAX};
use crate::provider::testing::{run, Call, RecordingSink};
use crate::provider::{LogLevel, ProviderError, Value};

/// Records what the peer sends; `send` fails once `broken`.
#[derive(Default)]
struct Wire {
    sent: RefCell<Vec<Value>>,
    broken: std::cell::Cell<bool>,
}

impl Transport for Wire {
    fn send(&self, message: Vec<u8>) -> Result<(), String> {
        if self.broken.get() {
            return Err("broken".into());
        }
        self.sent.borrow_mut().push(serde_json::from_slice(&message).expect("JSON"));
        Ok(())
    }

    fn shutdown(&self) {}
}

#[derive(Default)]
struct Events {
    seen: RefCell<Vec<String>>,
}

impl PeerEvents for Events {
    fn tools_changed(&self) {
        self.seen.borrow_mut().push("tools_changed".into());
    }

    fn notification(&self, method: &str, _params: Value) {
        self.seen.borrow_mut().push(method.to_owned());
    }

    fn log(&self, level: LogLevel, _logger: Option<&str>, _data: Value) {
        self.seen.borrow_mut().push(format!("log {}", level.as_str()));
    }
}

fn peer() -> (Rc<Peer>, Rc<Wire>, Rc<Events>) {
    let events = Rc::new(Events::default());
    let peer = Rc::new(Peer::new(Rc::from("up"), events.clone(), LONG));
    let wire = Rc::new(Wire::default());
    peer.bind(wire.clone());
    (peer, wire, events)
}

const LONG: Duration = Duration::from_secs(5);

/// Lets spawned tasks and timers run for `ms`.
async fn pause(ms: u64) {
    monoio::time::sleep(Duration::from_millis(ms)).await;
}

#[test]
fn a_tool_call_gets_its_own_token_and_its_progress_and_answer() {
    run(async {
        let (peer, wire, _) = peer();
        let sink = Rc::new(RecordingSink::default());
        let cx = sink.context();
        let p = peer.clone();
        let call = monoio::spawn(async move {
            p.request("tools/call", json!({ "name": "t" }), Some(cx), LONG).await
        });
        pause(1).await;
        let sent = wire.sent.borrow()[0].clone();
        let id = sent["id"].as_u64().expect("numeric id");
        assert_eq!(sent["params"]["_meta"]["progressToken"], id, "token = the request id");
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/progress",
            "params": { "progressToken": id, "progress": 1, "total": 2, "message": "half" } }));
        // Another token is no call of ours: dropped.
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/progress",
            "params": { "progressToken": id + 100, "progress": 9 } }));
        peer.receive(json!({ "jsonrpc": "2.0", "id": id, "result": { "content": [] } }));
        assert_eq!(call.await, Ok(json!({ "content": [] })));
        let progress =
            Call::Progress { progress: 1.0, total: Some(2.0), message: Some("half".into()) };
        assert_eq!(sink.calls(), vec![progress]);
    });
}

#[test]
fn an_upstream_error_is_relayed_as_is() {
    run(async {
        let (peer, wire, _) = peer();
        let p = peer.clone();
        let call =
            monoio::spawn(async move { p.request("prompts/get", json!({}), None, LONG).await });
        pause(1).await;
        let id = wire.sent.borrow()[0]["id"].clone();
        peer.receive(json!({ "jsonrpc": "2.0", "id": id,
            "error": { "code": -32002, "message": "no such prompt", "data": { "x": 1 } } }));
        let expected = ProviderError::Rpc {
            code: -32002,
            message: "no such prompt".into(),
            data: Some(json!({ "x": 1 })),
        };
        assert_eq!(call.await, Err(expected));
    });
}

#[test]
fn a_request_from_the_upstream_goes_to_the_running_call_and_the_answer_back() {
    run(async {
        let (peer, wire, _) = peer();
        let sink = Rc::new(RecordingSink::default());
        sink.answer("sampling/createMessage", Ok(json!({ "content": { "text": "yes" } })));
        let cx = sink.context();
        let p = peer.clone();
        let _call = monoio::spawn(async move {
            p.request("tools/call", json!({ "name": "t" }), Some(cx), LONG).await
        });
        pause(1).await;
        peer.receive(json!({ "jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
            "params": { "maxTokens": 1 } }));
        pause(1).await;
        let answer = wire.sent.borrow().last().cloned().expect("an answer");
        assert_eq!(
            answer,
            json!({ "jsonrpc": "2.0", "id": "s1", "result": { "content": { "text": "yes" } } })
        );
        let asked = Call::Request {
            method: "sampling/createMessage".into(),
            params: json!({ "maxTokens": 1 }),
        };
        assert_eq!(sink.calls(), vec![asked]);
    });
}

#[test]
fn a_request_from_the_upstream_with_no_call_running_is_refused_and_ping_answered() {
    run(async {
        let (peer, wire, _) = peer();
        peer.receive(json!({ "jsonrpc": "2.0", "id": 7, "method": "roots/list" }));
        peer.receive(json!({ "jsonrpc": "2.0", "id": 8, "method": "ping" }));
        let sent = wire.sent.borrow().clone();
        assert_eq!(sent[0]["error"]["code"], -32603, "{sent:?}");
        assert_eq!(sent[1], json!({ "jsonrpc": "2.0", "id": 8, "result": {} }));
    });
}

#[test]
fn dropping_a_call_cancels_it_upstream_and_a_late_answer_is_ignored() {
    run(async {
        let (peer, wire, _) = peer();
        let sink = Rc::new(RecordingSink::default());
        let cx = sink.context();
        let p = peer.clone();
        {
            let mut call =
                Box::pin(p.request("tools/call", json!({ "name": "t" }), Some(cx), LONG));
            let waker = std::task::Waker::noop();
            let polled = call.as_mut().poll(&mut std::task::Context::from_waker(waker));
            assert!(polled.is_pending());
        }
        let sent = wire.sent.borrow().clone();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[1]["method"], "notifications/cancelled");
        assert_eq!(sent[1]["params"]["requestId"], sent[0]["id"]);
        // The answer that crosses the cancellation finds nobody and changes nothing.
        peer.receive(json!({ "jsonrpc": "2.0", "id": sent[0]["id"], "result": {} }));
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/progress",
            "params": { "progressToken": sent[0]["id"], "progress": 1 } }));
        assert!(sink.calls().is_empty());
    });
}

#[test]
fn a_timed_out_call_is_an_error_naming_the_upstream_and_is_cancelled_upstream() {
    run(async {
        let (peer, wire, _) = peer();
        let answer = peer
            .request("tools/call", json!({ "name": "t" }), None, Duration::from_millis(20))
            .await;
        let Err(ProviderError::Rpc { code, data, .. }) = answer else { panic!("{answer:?}") };
        assert_eq!(code, -32603);
        assert_eq!(data, Some(json!({ "upstream": "up", "timeoutSecs": 0 })));
        assert_eq!(wire.sent.borrow()[1]["method"], "notifications/cancelled");
    });
}

#[test]
fn the_upstreams_end_fails_every_waiting_call_and_every_later_one() {
    run(async {
        let (peer, wire, _) = peer();
        let p = peer.clone();
        let call =
            monoio::spawn(async move { p.request("tools/call", json!({}), None, LONG).await });
        pause(1).await;
        peer.closed("exited with status 3");
        let fault = |reason: &str| ProviderError::Rpc {
            code: -32603,
            message: format!("upstream up failed: {reason}"),
            data: Some(json!({ "upstream": "up", "reason": reason })),
        };
        assert_eq!(call.await, Err(fault("exited with status 3")));
        assert!(!peer.is_alive());
        let later = peer.request("ping", json!({}), None, LONG).await;
        assert_eq!(later, Err(fault("exited with status 3")));
        assert_eq!(wire.sent.borrow().len(), 1, "nothing sent to a gone upstream");
        // A transport that refuses a message fails that request at once.
        let (peer, wire, _) = self::peer();
        wire.broken.set(true);
        let refused = peer.request("ping", json!({}), None, LONG).await;
        assert_eq!(refused, Err(fault("broken")));
    });
}

#[test]
fn notifications_outside_calls_go_to_the_session_and_odd_methods_nowhere() {
    run(async {
        let (peer, _, events) = peer();
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" }));
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/resources/updated", "params": { "uri": "x" } }));
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": { "level": "warning", "data": 1 } }));
        peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": { "level": "loud", "data": 1 } }));
        peer.receive(json!({ "jsonrpc": "2.0", "method": "bad\"method" }));
        peer.receive(json!([1, 2]));
        let seen = events.seen.borrow().clone();
        assert_eq!(seen, ["tools_changed", "notifications/resources/updated", "log warning"]);
    });
}

#[test]
fn list_all_follows_cursors() {
    run(async {
        let (peer, wire, _) = peer();
        let p = peer.clone();
        let listing = monoio::spawn(async move { p.list_all("tools/list", "tools", LONG).await });
        pause(1).await;
        let first = wire.sent.borrow()[0].clone();
        assert_eq!(first["params"], json!({}));
        peer.receive(json!({ "jsonrpc": "2.0", "id": first["id"], "result": { "tools": [1], "nextCursor": "c2" } }));
        pause(1).await;
        let second = wire.sent.borrow()[1].clone();
        assert_eq!(second["params"], json!({ "cursor": "c2" }));
        peer.receive(
            json!({ "jsonrpc": "2.0", "id": second["id"], "result": { "tools": [2, 3] } }),
        );
        assert_eq!(listing.await, Ok(vec![json!(1), json!(2), json!(3)]));
    });
}

#[test]
fn progress_restarts_a_calls_idle_timeout_and_silence_ends_it() {
    // Goal (issue 38 finding 9): a tool call's timeout runs from the upstream's last message
    // for it: progress every 60 ms keeps a 150 ms timeout from firing over 400 ms, and the
    // answer arrives; a request that is not a tool call keeps its timeout from the send.
    run(async {
        let (peer, wire, _) = peer();
        let sink = Rc::new(RecordingSink::default());
        let cx = sink.context();
        let p = peer.clone();
        let idle = Duration::from_millis(150);
        let call =
            monoio::spawn(async move { p.request("tools/call", json!({}), Some(cx), idle).await });
        let q = peer.clone();
        let plain =
            monoio::spawn(async move { q.request("prompts/get", json!({}), None, idle).await });
        pause(1).await;
        let id = wire.sent.borrow()[0]["id"].as_u64().expect("id");
        for step in 1..=7 {
            pause(60).await;
            peer.receive(json!({ "jsonrpc": "2.0", "method": "notifications/progress",
                "params": { "progressToken": id, "progress": step } }));
        }
        peer.receive(json!({ "jsonrpc": "2.0", "id": id, "result": { "content": [] } }));
        assert_eq!(call.await, Ok(json!({ "content": [] })), "busy, not idle");
        let Err(ProviderError::Rpc { data, .. }) = plain.await else { panic!("timed out") };
        assert_eq!(data.expect("data")["timeoutSecs"], 0, "the plain request timed out");
    });
}

#[test]
fn refuse_fails_one_call_at_once_and_reset_fails_them_all() {
    // Goal (issue 38 finding 8): an answer that cannot be taken fails its call alone, with the
    // reason; a reset fails every waiting call and the peer is gone.
    run(async {
        let (peer, wire, _) = peer();
        let spawn = |peer: &Rc<Peer>| {
            let p = peer.clone();
            monoio::spawn(async move { p.request("tools/call", json!({}), None, LONG).await })
        };
        let (first, second, third) = (spawn(&peer), spawn(&peer), spawn(&peer));
        pause(1).await;
        let id = wire.sent.borrow()[0]["id"].as_u64().expect("id");
        assert!(peer.refuse(id, "too long"));
        assert!(!peer.refuse(id, "too long"), "no longer waiting");
        let Err(ProviderError::Rpc { data, .. }) = first.await else { panic!("refused") };
        assert_eq!(data.expect("data")["reason"], "too long");
        assert!(peer.is_alive(), "one refusal leaves the link");
        peer.reset("unreadable");
        for call in [second, third] {
            let Err(ProviderError::Rpc { data, .. }) = call.await else { panic!("reset") };
            assert_eq!(data.expect("data")["reason"], "unreadable");
        }
        assert!(!peer.is_alive());
    });
}

#[test]
fn a_message_read_from_its_text_has_the_members_of_its_value() {
    // Goal: reading an upstream's line straight into its members (`Incoming`) takes what the
    // `Value` path took: a key given twice keeps its last value, an escaped key is its text,
    // other members are skipped, `null` members are present, a non-object is not a message,
    // the result's text is its value's, and what is not JSON fails both. Method: each text both ways.
    use super::{Incoming, Members};
    let texts = [
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"é\n"}]}}"#,
        r#"{"id":1,"id":2,"result":null,"extra":{"a":[1,{"b":2}]},"error":{"code":1}}"#,
        r#"{"\u0069d":"s1","m\u0065thod":"sampling/createMessage","params":{"x":1}}"#,
        r#"{"method":7,"id":null,"params":null}"#,
        r#"{"method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
        r#"{}"#,
        r#"[1,{"id":1}]"#,
        r#""text""#,
        r#"12.5"#,
        r#"-3"#,
        r#"true"#,
        r#"null"#,
    ];
    let of_value = |value: Value| match value {
        Value::Object(mut o) => Some([
            o.remove("id"),
            o.remove("method"),
            o.remove("params"),
            o.remove("result"),
            o.remove("error"),
        ]),
        _ => None,
    };
    let of_incoming = |incoming: Incoming| match incoming {
        Incoming::Message(Members { id, method, params, result, error }) => {
            // The result is kept as its text: the same value once parsed.
            let result = result.map(|text| serde_json::from_str(text.get()).expect("JSON"));
            Some([id, method, params, result, error])
        }
        Incoming::NotObject => None,
    };
    for text in texts {
        let value: Value = serde_json::from_str(text).expect("JSON");
        let incoming: Incoming = serde_json::from_str(text).expect("JSON");
        assert_eq!(of_incoming(incoming), of_value(value), "{text}");
    }
    for bad in [r#"{"id":1"#, r#"{"id":1} x"#, r#"{"id":01}"#, r#"{"a":[}"#] {
        assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        assert!(serde_json::from_str::<Incoming>(bad).is_err(), "{bad}");
    }
}

#[test]
fn an_answered_requests_slot_serves_the_next_and_the_spares_stay_bounded() {
    run(async {
        let (peer, wire, _) = peer();
        // More requests in flight at once than the peer keeps spares for.
        let calls: Vec<_> = (0..SPARE_SLOTS_MAX + 2)
            .map(|_| {
                let p = peer.clone();
                monoio::spawn(async move { p.request("ping", json!({}), None, LONG).await })
            })
            .collect();
        pause(1).await;
        assert!(peer.state.borrow().spare_slots.is_empty(), "every slot is in use");
        for sent in wire.sent.borrow().iter() {
            peer.receive(json!({ "jsonrpc": "2.0", "id": sent["id"], "result": {} }));
        }
        for call in calls {
            assert_eq!(call.await, Ok(json!({})));
        }
        let spares = peer.state.borrow().spare_slots.iter().map(Rc::as_ptr).collect::<Vec<_>>();
        assert_eq!(spares.len(), SPARE_SLOTS_MAX, "kept up to the bound, the rest freed");
        // The next request takes a kept slot, emptied: its answer is its own.
        let p = peer.clone();
        let next = monoio::spawn(async move { p.request("ping", json!({}), None, LONG).await });
        pause(1).await;
        let id = wire.sent.borrow().last().expect("sent")["id"].clone();
        let in_use = peer.state.borrow().pending.values().next().map(|p| Rc::as_ptr(&p.slot));
        assert!(in_use.is_some_and(|slot| spares.contains(&slot)), "a kept slot is reused");
        peer.receive(json!({ "jsonrpc": "2.0", "id": id, "result": { "n": 2 } }));
        assert_eq!(next.await, Ok(json!({ "n": 2 })));
    });
}
