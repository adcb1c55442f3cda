//! Goal: start-up refuses what it cannot serve correctly. Method: start the real binary twice
//! on one port, and with bad flags; read its exit status and stderr.

mod support;

use std::process::{Command, Stdio};

use support::{run_to_exit, Server};

#[test]
fn a_second_server_on_a_port_in_use_fails_at_start() {
    // Goal: issue 11 §5: SO_REUSEPORT must not let a second tidemark split the first one's
    // connections. Method: start one on port 0, start another on its port; the second must exit
    // non-zero naming the address, and the first must still answer.
    for driver in support::DRIVERS {
        let first = Server::on(driver, &["--threads", "2"]);
        let addr = first.addr.to_string();
        let (code, stderr) = run_to_exit(&["--listen", &addr, "--driver", driver]);
        assert_ne!(code, Some(0), "{driver}: second server started: {stderr}");
        assert!(code.is_some(), "{driver}: second server did not exit: {stderr}");
        assert!(stderr.contains(&addr) && stderr.contains("in use"), "{driver}: {stderr}");
        let sid = support::open_session(&first);
        assert!(!sid.is_empty(), "{driver}: the first server still serves");
    }
}

#[test]
fn a_server_starts_on_a_port_freed_by_another() {
    // Goal: the probe does not refuse a port that is merely in TIME_WAIT or was just released.
    // Method: start, serve one request, stop, start again on the same port.
    let first = Server::start(&[]);
    let addr = first.addr.to_string();
    let _ = support::open_session(&first);
    drop(first);
    let mut again = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", &addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tidemark");
    let mut banner = String::new();
    let stdout = again.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut banner).expect("read");
    let _ = again.kill();
    let _ = again.wait();
    assert!(banner.contains(&format!("http://{addr}/mcp")), "banner: {banner:?}");
}
