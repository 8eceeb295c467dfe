//! A push service for tests: an HTTP server on 127.0.0.1 that records every notification
//! Chorus POSTs to it, checks its signature, and answers as the test says (take it, fail with
//! 500, refuse it with 400, or hang past Chorus's timeout).

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::Value;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Take,
    /// 500: a push service that may take it later.
    Fail,
    /// 400: a push service that never will.
    Refuse,
    /// Answers nothing for a minute: every attempt times out.
    Hang,
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub key: String,
    pub signature_ok: bool,
    /// The body exactly as sent.
    pub raw: String,
    pub body: Value,
    pub answered: Behaviour,
    pub at: Instant,
}

struct Shared {
    secret: Vec<u8>,
    behaviour: Mutex<Behaviour>,
    received: Mutex<Vec<Received>>,
}

pub struct PushReceiver {
    /// What `CHORUS_PUSH_URL` is set to.
    pub url: String,
    shared: Arc<Shared>,
    handle: ServerHandle,
}

impl PushReceiver {
    /// Listens on a free port of 127.0.0.1, verifying signatures with `secret`; takes
    /// everything until told otherwise.
    pub fn start(secret: &str) -> PushReceiver {
        let shared = Arc::new(Shared {
            secret: secret.as_bytes().to_vec(),
            behaviour: Mutex::new(Behaviour::Take),
            received: Mutex::new(Vec::new()),
        });
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the push receiver");
        let port = listener.local_addr().expect("its port").port();
        let data = web::Data::from(shared.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(receive))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        PushReceiver {
            url: format!("http://127.0.0.1:{port}/push"),
            shared,
            handle,
        }
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().expect("lock") = behaviour;
    }

    /// Every request so far, taken or not.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("lock").clone()
    }

    /// The requests it took (answered 200).
    pub fn taken(&self) -> Vec<Received> {
        let all = self.received();
        all.into_iter()
            .filter(|r| r.answered == Behaviour::Take)
            .collect()
    }

    /// Waits until `done` holds for the requests received so far and returns them; fails the
    /// test with what arrived when `within` passes first.
    pub async fn wait_for(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let received = self.received();
            if done(&received) {
                return received;
            }
            if Instant::now() >= deadline {
                let bodies: Vec<String> = received
                    .iter()
                    .map(|r| format!("{:?} {}", r.answered, r.raw))
                    .collect();
                panic!(
                    "the push receiver did not see {what} within {within:?}; it saw {bodies:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PushReceiver {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { handle.stop(false).await });
        }
    }
}

async fn receive(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let behaviour = *shared.behaviour.lock().expect("lock");
    let raw = String::from_utf8_lossy(&body).into_owned();
    shared.received.lock().expect("lock").push(Received {
        key: header("idempotency-key"),
        signature_ok: header("x-chorus-signature") == expected_signature(&shared.secret, &body),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
        answered: behaviour,
        at: Instant::now(),
    });
    match behaviour {
        Behaviour::Take => HttpResponse::Ok().finish(),
        Behaviour::Fail => HttpResponse::InternalServerError().finish(),
        Behaviour::Refuse => HttpResponse::BadRequest().finish(),
        Behaviour::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            HttpResponse::Ok().finish()
        }
    }
}

/// `sha256=<hex HMAC-SHA256>`, computed here from the crates, not with Chorus's own function.
fn expected_signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret).expect("key");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}
