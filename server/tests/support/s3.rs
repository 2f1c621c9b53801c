//! An S3-protocol server for tests: moto's (PyPI `moto[server]`), on a loopback port, with
//! static test credentials. `scripts/setup.sh` installs it.

use std::time::Duration;

/// A running moto server.
pub struct Moto {
    pub endpoint: String,
    child: std::process::Child,
    http: reqwest::Client,
}

impl Moto {
    /// Starts moto on a free loopback port and waits until it answers.
    pub async fn start() -> Moto {
        let port = super::procs::free_port();
        let spawn = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
        };
        let child = spawn("moto_server", &[]).or_else(|_| spawn("python3", &["-m", "moto.server"])).expect("moto_server (PyPI moto[server]) must be installed: scripts/setup.sh does");
        let endpoint = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..300 {
            if http.get(format!("{endpoint}/")).send().await.is_ok() {
                return Moto { endpoint, child, http };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("moto did not start on {endpoint}");
    }

    /// Creates a bucket.
    pub async fn bucket(&self, name: &str) {
        let resp = self.http.put(format!("{}/{name}", self.endpoint)).send().await.unwrap();
        assert!(resp.status().is_success(), "create bucket {name}: {}", resp.status());
    }

    /// The environment that points object_store's S3 client at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test-key".into()),
            ("AWS_SECRET_ACCESS_KEY", "test-secret".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".into()),
        ]
    }

    /// The multipart uploads begun and neither completed nor aborted in `bucket`.
    pub async fn open_uploads(&self, bucket: &str) -> usize {
        let body = self.http.get(format!("{}/{bucket}?uploads", self.endpoint)).send().await.unwrap().text().await.unwrap();
        body.matches("<Upload>").count()
    }

    /// The keys under `prefix` in `bucket`.
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let body = self.http.get(format!("{}/{bucket}?list-type=2&prefix={prefix}", self.endpoint)).send().await.unwrap().text().await.unwrap();
        let mut keys: Vec<String> = body.split("<Key>").skip(1).filter_map(|s| s.split("</Key>").next()).map(str::to_owned).collect();
        keys.sort();
        keys
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
