// Package deadline carries a request's two deadlines from the frontend that
// received it to the commit that sends its writes to the store.
//
// The frontend's own deadline (listen.request_timeout, or by default one
// derived from the service and the client's deadline, Within it: the
// request's context) bounds waiting: for locks, for reads, for the store to answer a
// read. Cut short there, a request that sent nothing is answered with the
// protocol's retryable error while the client's retry policy still has time
// to use it. A write nemo has begun sending to the store is different:
// cutting it off at that deadline leaves its outcome unknown
// (DEADLINE_EXCEEDED, 500 OperationTimedOut) though the store may apply it a
// moment later, and the client, which would have waited, must find out
// what happened. So a commit that writes through runs on, once it is sent,
// until the request's long deadline: the client's own (a gRPC call's
// deadline, Azure's timeout parameter, at most 30 s), capped
// by the frontend at what it can still answer within (listen.write_timeout
// less its margin). A commit the WAL has taken (coherence exclusive) is
// written whatever its context says: the WAL marks its request (Sending)
// so that the frontend waits for it too. A frontend starts each request
// with Start (Bound lowers both deadlines for Azure's timeout parameter); a
// frontend that answers at its own deadline without waiting for the
// handler asks Cut first, and waits for the handler until Long ends when a
// write was sent. Only the frontend's own deadline costs a request a timer,
// and only once something waits on it (its context's Done): a request
// answered without waiting (a buffer hit) costs none.
//
// Lock order: Request.mu is a leaf; the mutex of Start's context comes
// before the context package's own (of the client's context).
package deadline
