//! A gRPC server on a unix socket, as kubelet's plugins serve theirs:
//! HTTP/2 with hyper, requests routed to their method by path as a
//! generated server does, on a thread and runtime of its own. plexus's DRA
//! kubelet plugin (registration and `DRAPlugin`), the test kit's stand-in
//! PodResources server and its device plugin all run on it. Requests from
//! grpc-go clients that name the socket path as their authority, as kubelet
//! before 1.26 does, are taken ([`authority`]).

use std::convert::Infallible;
use std::future::Future;
use std::os::unix::net::UnixListener;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;

mod authority;
use authority::AuthorityFix;

/// A method's HTTP answer.
pub type Answer = http::Response<tonic::body::Body>;
pub type Answering = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// What a server serves: each request to the answer of the method its path
/// names.
pub trait Routes: Send + Sync + 'static {
    fn route(self: Arc<Self>, request: http::Request<Incoming>) -> Answering;
}

/// The running server; it stops (its connections cancelled) when dropped.
pub struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `routes` on `listener` (bound already: clients may connect
    /// before this returns) until dropped.
    pub fn start(listener: UnixListener, routes: Arc<dyn Routes>) -> Server {
        listener.set_nonblocking(true).expect("non-blocking socket");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            // Dropping the runtime afterwards cancels the connections' tasks.
            runtime.block_on(serve(listener, routes, stopped));
        });
        Server {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accept connections until told to stop; each is served on its own task.
async fn serve(
    listener: UnixListener,
    routes: Arc<dyn Routes>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::UnixListener::from_std(listener).expect("tokio listener");
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => return,
            },
        };
        let service = TowerToHyperService::new(Router(routes.clone()));
        tokio::spawn(async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(AuthorityFix::new(stream)), service)
                .await;
        });
    }
}

/// [`Routes`] as the service hyper calls.
#[derive(Clone)]
struct Router(Arc<dyn Routes>);

impl tower::Service<http::Request<Incoming>> for Router {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        let answer = self.0.clone().route(request);
        Box::pin(async move { Ok(answer.await) })
    }
}

/// The answer to a path no method has, as grpc-go gives it.
pub fn unknown_method(path: &str) -> Answer {
    tonic::Status::unimplemented(format!("unknown method {path}")).into_http()
}
