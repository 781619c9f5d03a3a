#![allow(clippy::unwrap_used)]
//! The server as Python applications see it through redis-py, the usual
//! Python client: MULTI/EXEC and plain pipelines, optimistic locking with
//! WATCH from several threads (`pipeline().watch()` and `transaction()`),
//! the hash, set, sorted-set and list commands with their options, SCAN
//! iterators over big collections, a leaderboard and a job queue,
//! WRONGTYPE errors, TYPE, DEL and expiry of composite keys. Every reply is
//! checked against what Redis 7.0 answers, over RESP2, over RESP3 and over
//! the client's default protocol (RESP3 with RESP2-style Python values on
//! redis-py 8), since redis-py shapes the values differently for each.

mod common;

use std::time::Duration;

/// How long one run of the script may take.
const LIMIT: Duration = Duration::from_secs(120);

/// Runs `script` with `args`; `None` when redis-py is missing in a partial
/// run.
fn python(script: &str, args: &[String]) -> Option<String> {
    tern_stress::python::run_redis_py(script, args, "redis", LIMIT)
}

/// Runs the script against a fresh server, redis-py speaking `mode`: "2",
/// "3" or "default" (no `protocol` argument).
fn run_script(mode: &str) {
    let server = common::start();
    let port = server.addr().port().to_string();
    let Some(out) = python(SCRIPT, &[port, mode.to_string()]) else {
        return;
    };
    print!("{out}");
    if let Some(why) = out.strip_prefix("SKIP: ") {
        eprintln!("SKIPPED: {}", why.trim());
    }
}

#[test]
fn resp2() {
    run_script("2");
}

#[test]
fn resp3() {
    run_script("3");
}

#[test]
fn default_protocol() {
    run_script("default");
}

/// The application-style checks. Arguments: the server's port, and the
/// protocol ("2", "3" or "default").
const SCRIPT: &str = r#"
import sys
import threading
import time

import redis

port = int(sys.argv[1])
mode = sys.argv[2]
major = int(redis.__version__.split(".")[0])
if mode == "3" and major < 5:
    print(f"SKIP: redis-py {redis.__version__} has no RESP3 (protocol=3)")
    sys.exit(0)
kwargs = {} if mode == "default" else {"protocol": int(mode)}
# redis-py's RESP3 shapes (lists of [member, score], maps as they come)
# differ from its RESP2 ones; the default protocol keeps RESP2 shapes.
RESP3 = mode == "3"


def client(**extra):
    return redis.Redis(
        host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10,
        **kwargs, **extra
    )


def same(got, want):
    """Equal, with the same types all the way down (1.0 is not 1)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(want, (set, frozenset)):
        return got == want and {type(g) for g in got} <= {type(w) for w in want}
    return got == want


def check(what, got, want):
    assert same(got, want), f"{what}: got {got!r}, want {want!r}"


def check_error(what, fn, prefix):
    try:
        got = fn()
    except redis.ResponseError as e:
        assert str(e).startswith(prefix), f"{what}: error {e!r}, want {prefix!r}..."
        return
    raise AssertionError(f"{what}: got {got!r}, want a {prefix!r} error")


def pairs(*items):
    """The (member, score) list ZRANGE ... WITHSCORES and ZPOP* give."""
    if RESP3:
        return [[m, s] for m, s in items]
    return [(m, s) for m, s in items]


r = client()
check("ping", r.ping(), True)
check("flushdb", r.flushdb(), True)


def pipelines():
    # MULTI/EXEC (transaction=True is the default) across all the types.
    with r.pipeline() as p:
        p.set("pl:s", "v").incr("pl:n").incr("pl:n", 5)
        p.hset("pl:h", mapping={"a": "1", "b": "2"})
        p.sadd("pl:set", "x", "y", "x")
        p.zadd("pl:z", {"m1": 1, "m2": 2.5})
        p.rpush("pl:l", "a", "b", "c")
        p.get("pl:s").hgetall("pl:h").smembers("pl:set")
        p.zrange("pl:z", 0, -1, withscores=True).lrange("pl:l", 0, -1)
        res = p.execute()
    check(
        "MULTI/EXEC pipeline",
        res,
        [True, 1, 6, 2, 2, 2, 3, "v", {"a": "1", "b": "2"}, {"x", "y"},
         pairs(("m1", 1.0), ("m2", 2.5)), ["a", "b", "c"]],
    )
    # An error at EXEC time fails that command only.
    with r.pipeline() as p:
        p.set("pl:e", "x").incr("pl:e").set("pl:e2", "y").get("pl:e")
        res = p.execute(raise_on_error=False)
    check("exec-time error: results around it", [res[0], res[2], res[3]], [True, True, "x"])
    assert isinstance(res[1], redis.ResponseError), res
    assert str(res[1]).startswith("value is not an integer"), res
    with r.pipeline() as p:
        p.set("pl:e", "x").incr("pl:e")
        try:
            p.execute()
            raise AssertionError("execute() did not raise")
        except redis.ResponseError as e:
            assert "value is not an integer" in str(e), e
    # An error while queueing aborts the whole transaction.
    with r.pipeline() as p:
        p.set("pl:abort", "1").execute_command("SET", "pl:abort")
        try:
            p.execute()
            raise AssertionError("execute() did not raise")
        except redis.ResponseError as e:
            assert "wrong number of arguments" in str(e), e
    check("EXECABORT leaves nothing behind", r.exists("pl:abort"), 0)
    # An empty transaction.
    with r.pipeline() as p:
        check("empty pipeline", p.execute(), [])

    # Plain pipelining, no MULTI.
    with r.pipeline(transaction=False) as p:
        p.set("np:a", "1").incr("np:a").hset("np:h", "f", "v").sadd("np:s", "m")
        p.zadd("np:z", {"m": 3}).rpush("np:l", "x").incr("np:h")
        p.lpop("np:l").zscore("np:z", "m").get("np:a")
        res = p.execute(raise_on_error=False)
    check("plain pipeline", res[:6], [True, 2, 1, 1, 1, 1])
    assert isinstance(res[6], redis.ResponseError) and str(res[6]).startswith(
        "WRONGTYPE"
    ), res
    check("plain pipeline tail", res[7:], ["x", 3.0, "2"])
    with r.pipeline(transaction=False) as p:
        for _ in range(1000):
            p.incr("np:many")
        check("1000 pipelined INCRs", p.execute(), list(range(1, 1001)))
    check("after 1000 INCRs", r.get("np:many"), "1000")


def watch():
    # WATCH, then another client writes: EXEC fails with WatchError.
    r.set("w:k", "1")
    other = client()
    with r.pipeline() as p:
        check("watch", p.watch("w:k"), True)
        check("get under watch", p.get("w:k"), "1")
        other.set("w:k", "1")  # the same value still counts as a write
        p.multi()
        p.set("w:k", "2")
        try:
            p.execute()
            raise AssertionError("EXEC after a concurrent SET did not fail")
        except redis.WatchError:
            pass
    check("value after failed EXEC", r.get("w:k"), "1")
    # A hash written field by field, and a deleted key, also abort.
    r.hset("w:h", "f", "1")
    for name, write in [
        ("HSET", lambda: other.hset("w:h", "g", "2")),
        ("DEL", lambda: other.delete("w:h")),
    ]:
        with r.pipeline() as p:
            p.watch("w:h")
            write()
            p.multi()
            p.hset("w:h", "mine", "1")
            try:
                p.execute()
                raise AssertionError(f"EXEC after a concurrent {name} did not fail")
            except redis.WatchError:
                pass
        check(f"hexists after {name} + failed EXEC", r.hexists("w:h", "mine"), False)
    # Untouched watched keys: EXEC runs.
    with r.pipeline() as p:
        p.watch("w:k", "w:none")
        other.set("w:unrelated", "1")
        p.multi()
        p.set("w:k", "3").get("w:k")
        check("EXEC with untouched watches", p.execute(), [True, "3"])
    # UNWATCH (reset) forgets the watch.
    with r.pipeline() as p:
        p.watch("w:k")
        p.unwatch()
        other.set("w:k", "4")
        p.multi()
        p.set("w:k", "5")
        check("EXEC after UNWATCH", p.execute(), [True])
    check("after EXEC", r.get("w:k"), "5")

    # The optimistic-locking loop from several threads at once.
    r.delete("w:ctr")
    errors = []
    retries = [0]
    deadline = time.time() + 30

    def incr_many(n):
        try:
            c = client()
            for _ in range(n):
                while True:
                    with c.pipeline() as p:
                        try:
                            p.watch("w:ctr")
                            v = p.get("w:ctr")
                            v = int(v) if v is not None else 0
                            p.multi()
                            p.set("w:ctr", v + 1)
                            p.execute()
                            break
                        except redis.WatchError:
                            retries[0] += 1
                            assert time.time() < deadline, "WATCH loop: no progress"
            c.close()
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=incr_many, args=(50,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check("WATCH counter, 4 threads x 50", r.get("w:ctr"), "200")
    print(f"watch retries: {retries[0]}")
    other.close()


def transactions():
    r.set("acct:a", 100)
    r.set("acct:b", 0)

    def move(pipe):
        a = int(pipe.get("acct:a"))
        b = int(pipe.get("acct:b"))
        pipe.multi()
        pipe.set("acct:a", a - 10)
        pipe.set("acct:b", b + 10)
        pipe.get("acct:a")

    check("transaction()", r.transaction(move, "acct:a", "acct:b"), [True, True, "90"])
    check(
        "transaction(value_from_callable=True)",
        r.transaction(lambda p: p.get("acct:b"), "acct:b", value_from_callable=True),
        "10",
    )
    # Transfers between three accounts from four threads, each one a
    # read-modify-write of two balances: nothing may be lost.
    accounts = ["acct:x", "acct:y", "acct:z"]
    r.mset({k: 1000 for k in accounts})
    want = {k: 1000 for k in accounts}
    lock = threading.Lock()
    errors = []

    def transfers(seed):
        try:
            c = client()
            for i in range(40):
                src = accounts[(seed + i) % 3]
                dst = accounts[(seed + 2 * i + 1) % 3]
                if src == dst:
                    continue
                amount = (seed * 7 + i) % 13 + 1

                def step(pipe):
                    s = int(pipe.get(src))
                    d = int(pipe.get(dst))
                    pipe.multi()
                    pipe.set(src, s - amount)
                    pipe.set(dst, d + amount)

                c.transaction(step, src, dst)
                with lock:
                    want[src] -= amount
                    want[dst] += amount
            c.close()
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=transfers, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check("balances after concurrent transfers", r.mget(accounts), [str(want[k]) for k in accounts])


def hashes():
    check("hset mapping", r.hset("h", mapping={"name": "ann", "age": "30", "score": "1.5"}), 3)
    check("hset existing field", r.hset("h", "age", "31"), 0)
    check("hset key/value + mapping", r.hset("h", "city", "oslo", mapping={"a": "b"}), 2)
    check("hgetall", r.hgetall("h"),
          {"name": "ann", "age": "31", "score": "1.5", "city": "oslo", "a": "b"})
    check("hget", r.hget("h", "name"), "ann")
    check("hget missing field", r.hget("h", "nope"), None)
    check("hget missing key", r.hget("h:none", "f"), None)
    check("hgetall missing key", r.hgetall("h:none"), {})
    check("hincrby", r.hincrby("h", "age", 2), 33)
    check("hincrby negative", r.hincrby("h", "age", -40), -7)
    check("hincrby new field", r.hincrby("h", "visits"), 1)
    check("hincrbyfloat", r.hincrbyfloat("h", "score", 0.25), 1.75)
    check("hincrbyfloat new field", r.hincrbyfloat("h", "ratio", 2.5), 2.5)
    check("hincrbyfloat to integer", r.hincrbyfloat("h", "ratio", 0.5), 3.0)
    check("hget after hincrbyfloat", r.hget("h", "ratio"), "3")
    check_error("hincrby on text", lambda: r.hincrby("h", "name", 1),
                "hash value is not an integer")
    check_error("hincrbyfloat on text", lambda: r.hincrbyfloat("h", "name", 1.0),
                "hash value is not a float")
    check("hsetnx existing", r.hsetnx("h", "name", "bob"), 0)
    check("hsetnx new", r.hsetnx("h", "nick", "a"), 1)
    check("hstrlen", r.hstrlen("h", "city"), 4)
    check("hdel", r.hdel("h", "a", "nope", "nick"), 2)
    check("hexists", r.hexists("h", "name"), True)
    check("hexists deleted", r.hexists("h", "a"), False)
    check("hlen", r.hlen("h"), 6)
    check("hlen missing key", r.hlen("h:none"), 0)
    check("hkeys", sorted(r.hkeys("h")), ["age", "city", "name", "ratio", "score", "visits"])
    check("hvals", sorted(r.hvals("h")), ["-7", "1", "1.75", "3", "ann", "oslo"])
    check("hmget", r.hmget("h", ["name", "nope", "age"]), ["ann", None, "-7"])
    check("hmget args", r.hmget("h", "city", "score"), ["oslo", "1.75"])
    check("hset h2", r.hset("h2", "x", "1"), 1)
    fields = r.hrandfield("h", 3)
    assert len(fields) == 3 and len(set(fields)) == 3, fields
    assert set(fields) <= set(r.hkeys("h")), fields
    fields = r.hrandfield("h", -20)
    assert len(fields) == 20 and set(fields) <= set(r.hkeys("h")), fields
    # RESP3 HRANDFIELD WITHVALUES is a list of [field, value] pairs.
    r.hset("h3", mapping={"a": "1", "b": "2", "c": "3"})
    got = r.hrandfield("h3", 3, withvalues=True)
    if RESP3:
        check("hrandfield withvalues", sorted(got), [["a", "1"], ["b", "2"], ["c", "3"]])
    else:
        check("hrandfield withvalues", sorted(zip(got[::2], got[1::2])),
              [("a", "1"), ("b", "2"), ("c", "3")])
    check("hrandfield missing key", r.hrandfield("h:none"), None)
    check("hrandfield count missing key", r.hrandfield("h:none", 2), [])
    # Deleting the last field deletes the key.
    check("hdel all", r.hdel("h2", "x"), 1)
    check("exists after last hdel", r.exists("h2"), 0)

    # A big hash: HSCAN returns every field exactly once.
    n = 3000
    big = {f"f{i}": f"v{i}" for i in range(n)}
    check("hset big", r.hset("hbig", mapping=big), n)
    seen = {}
    for f, v in r.hscan_iter("hbig", count=100):
        assert f not in seen, f"hscan_iter returned {f} twice"
        seen[f] = v
    check("hscan_iter", seen, big)
    matched = sorted(f for f, _ in r.hscan_iter("hbig", match="f12*"))
    check("hscan_iter match", matched, sorted(f for f in big if f.startswith("f12")))
    cursor, page = r.hscan("hbig", 0, count=10)
    assert isinstance(cursor, int) and len(page) >= 1, (cursor, len(page))
    check("hlen big", r.hlen("hbig"), n)
    check("hgetall big", r.hgetall("hbig"), big)


def sets():
    check("sadd", r.sadd("s1", "a", "b", "c", "d", "a"), 4)
    check("sadd again", r.sadd("s1", "a", "e"), 1)
    check("srem", r.srem("s1", "e", "nope"), 1)
    check("smembers", r.smembers("s1"), {"a", "b", "c", "d"})
    check("smembers missing", r.smembers("s:none"), set())
    check("sismember", r.sismember("s1", "a"), 1)
    check("sismember no", r.sismember("s1", "z"), 0)
    check("smismember", r.smismember("s1", ["a", "z", "d"]), [1, 0, 1])
    check("scard", r.scard("s1"), 4)
    check("scard missing", r.scard("s:none"), 0)
    r.sadd("s2", "c", "d", "e")
    r.sadd("s3", "d", "x")
    check("sinter", r.sinter("s1", "s2"), {"c", "d"})
    check("sinter 3", r.sinter(["s1", "s2", "s3"]), {"d"})
    check("sinter with missing", r.sinter("s1", "s:none"), set())
    check("sunion", r.sunion("s1", "s2", "s3"), {"a", "b", "c", "d", "e", "x"})
    check("sdiff", r.sdiff("s1", "s2"), {"a", "b"})
    check("sinterstore", r.sinterstore("s:i", ["s1", "s2"]), 2)
    check("sinterstore result", r.smembers("s:i"), {"c", "d"})
    check("sunionstore", r.sunionstore("s:u", "s2", "s3"), 4)
    check("sunionstore result", r.smembers("s:u"), {"c", "d", "e", "x"})
    check("sdiffstore", r.sdiffstore("s:d", ["s1", "s2", "s3"]), 2)
    check("sdiffstore result", r.smembers("s:d"), {"a", "b"})
    check("sdiffstore empty deletes", r.sdiffstore("s:d", ["s3", "s3"]), 0)
    check("exists after empty store", r.exists("s:d"), 0)
    check("sintercard", r.sintercard(2, ["s1", "s2"]), 2)
    check("sintercard limit", r.sintercard(2, ["s1", "s1"], limit=3), 3)
    check("smove", r.smove("s1", "s3", "a"), True)
    check("smove missing member", r.smove("s1", "s3", "a"), False)
    check("after smove src", r.smembers("s1"), {"b", "c", "d"})
    check("after smove dst", r.smembers("s3"), {"a", "d", "x"})

    members = {f"m{i}" for i in range(20)}
    r.sadd("s:pop", *members)
    popped = r.spop("s:pop", 5)
    assert type(popped) is list, popped
    assert len(popped) == 5 and set(popped) <= members, popped
    rest = r.smembers("s:pop")
    check("spop count removes", rest, members - set(popped))
    one = r.spop("s:pop")
    assert one in rest, one
    check("scard after spop", r.scard("s:pop"), 14)
    check("spop missing", r.spop("s:none"), None)
    check("spop count missing", r.spop("s:none", 3), [])
    rest = r.smembers("s:pop")
    assert r.srandmember("s:pop") in rest
    distinct = r.srandmember("s:pop", 5)
    assert type(distinct) is list and len(set(distinct)) == 5 and set(distinct) <= rest, distinct
    allm = r.srandmember("s:pop", 100)
    check("srandmember count > card", sorted(allm), sorted(rest))
    repeat = r.srandmember("s:pop", -30)
    assert len(repeat) == 30 and set(repeat) <= rest, repeat
    check_error("spop negative count", lambda: r.execute_command("SPOP", "s:pop", -1),
                "value is out of range, must be positive")
    check_error("sintercard numkeys 0", lambda: r.execute_command("SINTERCARD", 0, "s1"),
                "numkeys should be greater than 0")
    check("smove to itself", r.smove("s3", "s3", "a"), True)
    check("smove to itself, not a member", r.smove("s3", "s3", "zz"), False)
    check("srandmember missing", r.srandmember("s:none"), None)
    check("srandmember count missing", r.srandmember("s:none", 3), [])
    check("smembers unchanged by srandmember", r.smembers("s:pop"), rest)

    big = {f"member:{i}" for i in range(2000)}
    r.sadd("s:big", *big)
    seen = []
    for m in r.sscan_iter("s:big", count=50):
        seen.append(m)
    check("sscan_iter count", len(seen), len(big))
    check("sscan_iter members", set(seen), big)
    matched = sorted(r.sscan_iter("s:big", match="member:19*"))
    check("sscan_iter match", matched, sorted(m for m in big if m.startswith("member:19")))


def zsets():
    check("zadd", r.zadd("z", {"a": 1, "b": 2, "c": 3}), 3)
    check("zadd update", r.zadd("z", {"a": 1.5, "d": 4}), 1)
    check("zadd ch", r.zadd("z", {"a": 1, "e": 5, "b": 2}, ch=True), 2)
    check("zadd nx", r.zadd("z", {"a": 100, "f": 6}, nx=True), 1)
    check("zscore after nx", r.zscore("z", "a"), 1.0)
    check("zadd xx", r.zadd("z", {"a": 1.25, "nope": 9}, xx=True, ch=True), 1)
    check("zscore after xx", r.zscore("z", "nope"), None)
    check("zadd gt lower", r.zadd("z", {"c": 2}, gt=True, ch=True), 0)
    check("zadd gt higher", r.zadd("z", {"c": 3.5}, gt=True, ch=True), 1)
    check("zadd lt higher", r.zadd("z", {"d": 10}, lt=True, ch=True), 0)
    check("zadd lt lower", r.zadd("z", {"d": 3.75}, lt=True, ch=True), 1)
    check("zadd incr", r.zadd("z", {"e": 0.5}, incr=True), 5.5)
    check("zadd incr nx existing", r.zadd("z", {"e": 1}, incr=True, nx=True), None)
    check("zadd incr xx missing", r.zadd("z", {"q": 1}, incr=True, xx=True), None)
    check("zincrby", r.zincrby("z", 2, "f"), 8.0)
    check("zincrby new", r.zincrby("z", -1.5, "g"), -1.5)
    check("zscore", r.zscore("z", "a"), 1.25)
    check("zscore missing", r.zscore("z", "none"), None)
    check("zmscore", r.zmscore("z", ["a", "none", "g"]), [1.25, None, -1.5])
    check("zcard", r.zcard("z"), 7)
    # g -1.5, a 1.25, b 2, c 3.5, d 3.75, e 5.5, f 8
    everything = pairs(("g", -1.5), ("a", 1.25), ("b", 2.0), ("c", 3.5),
                       ("d", 3.75), ("e", 5.5), ("f", 8.0))
    check("zrange withscores", r.zrange("z", 0, -1, withscores=True), everything)
    check("zrange", r.zrange("z", 0, 2), ["g", "a", "b"])
    check("zrange negative", r.zrange("z", -2, -1), ["e", "f"])
    check("zrange out of range", r.zrange("z", 10, 20), [])
    check("zrange desc", r.zrange("z", 0, 2, desc=True), ["f", "e", "d"])
    check("zrange desc withscores", r.zrange("z", 0, 1, desc=True, withscores=True),
          pairs(("f", 8.0), ("e", 5.5)))
    check("zrange byscore", r.zrange("z", 2, 5.5, byscore=True), ["b", "c", "d", "e"])
    check("zrange byscore exclusive", r.zrange("z", "(2", "(5.5", byscore=True), ["c", "d"])
    check("zrange byscore offset", r.zrange("z", "-inf", "+inf", byscore=True, offset=2, num=3),
          ["b", "c", "d"])
    check("zrange byscore desc", r.zrange("z", 5.5, 2, byscore=True, desc=True, withscores=True),
          pairs(("e", 5.5), ("d", 3.75), ("c", 3.5), ("b", 2.0)))
    check("zrangebyscore", r.zrangebyscore("z", "-inf", 2), ["g", "a", "b"])
    check("zrangebyscore withscores page", r.zrangebyscore("z", 1, "+inf", start=1, num=2,
                                                           withscores=True),
          pairs(("b", 2.0), ("c", 3.5)))
    check("zrevrangebyscore", r.zrevrangebyscore("z", "+inf", 5), ["f", "e"])
    check("zrevrange", r.zrevrange("z", 0, 2), ["f", "e", "d"])
    check("zrevrange withscores", r.zrevrange("z", 0, 1, withscores=True),
          pairs(("f", 8.0), ("e", 5.5)))
    check("zrank", r.zrank("z", "a"), 1)
    check("zrevrank", r.zrevrank("z", "a"), 5)
    check("zrank missing", r.zrank("z", "none"), None)
    check("zcount", r.zcount("z", 2, 5.5), 4)
    check("zcount exclusive", r.zcount("z", "(2", "+inf"), 4)
    check("zcount all", r.zcount("z", "-inf", "+inf"), 7)

    r.zadd("lex", {m: 0 for m in ["apple", "banana", "cherry", "date", "elder"]})
    check("zrange bylex", r.zrange("lex", "[banana", "(date", bylex=True), ["banana", "cherry"])
    check("zrange bylex all", r.zrange("lex", "-", "+", bylex=True, offset=1, num=2),
          ["banana", "cherry"])
    check("zrange bylex desc", r.zrange("lex", "[d", "-", bylex=True, desc=True),
          ["cherry", "banana", "apple"])
    check_error("zrange bylex withscores",
                lambda: r.execute_command("ZRANGE", "lex", "-", "+", "BYLEX", "WITHSCORES"),
                "syntax error, WITHSCORES not supported in combination with BYLEX")
    check("zrangebylex", r.zrangebylex("lex", "(b", "[d"), ["banana", "cherry"])
    check("zrevrangebylex", r.zrevrangebylex("lex", "+", "[d"), ["elder", "date"])

    # RESP3 ZPOPMIN without a count is one flat [member, score] pair.
    check("zpopmin", r.zpopmin("z"), ["g", -1.5] if RESP3 else [("g", -1.5)])
    check("zpopmin count", r.zpopmin("z", 2), pairs(("a", 1.25), ("b", 2.0)))
    check("zpopmax count", r.zpopmax("z", 2), pairs(("f", 8.0), ("e", 5.5)))
    check("zpopmax missing", r.zpopmax("z:none"), [])
    check("zpopmin count missing", r.zpopmin("z:none", 2), [])
    check("zrange withscores missing", r.zrange("z:none", 0, -1, withscores=True), [])
    check("zrevrank missing key", r.zrevrank("z:none", "a"), None)
    check("zrange after pops", r.zrange("z", 0, -1), ["c", "d"])
    r.zadd("zr", {f"m{i}": i for i in range(10)})
    check("zremrangebyscore", r.zremrangebyscore("zr", 2, "(5"), 3)
    check("zremrangebyrank", r.zremrangebyrank("zr", 0, 1), 2)
    check("zremrangebyrank tail", r.zremrangebyrank("zr", -2, -1), 2)
    check("zrange after zrem*", r.zrange("zr", 0, -1), ["m5", "m6", "m7"])
    check("zrem", r.zrem("zr", "m5", "none"), 1)
    check("zremrangebyscore all deletes", r.zremrangebyscore("zr", "-inf", "+inf"), 2)
    check("exists after emptying", r.exists("zr"), 0)

    # Scores survive the round trip exactly: infinities, tiny and huge
    # values, and the sums of zincrby.
    r.zadd("zf", {"inf": float("inf"), "ninf": float("-inf"), "tiny": 5e-324,
                  "big": 1.7976931348623157e308, "third": 1 / 3})
    check("zscore inf", r.zscore("zf", "inf"), float("inf"))
    check("zscore -inf", r.zscore("zf", "ninf"), float("-inf"))
    check("zscore tiny", r.zscore("zf", "tiny"), 5e-324)
    check("zscore big", r.zscore("zf", "big"), 1.7976931348623157e308)
    check("zscore 1/3", r.zscore("zf", "third"), 1 / 3)
    for _ in range(3):
        last = r.zincrby("zf", 0.1, "sum")
    check("zincrby 0.1 x3", last, 0.1 + 0.1 + 0.1)
    check("zrange -inf/+inf ends", r.zrange("zf", 0, -1)[::5], ["ninf", "inf"])
    check_error("zincrby to NaN", lambda: r.zincrby("zf", float("-inf"), "inf"),
                "resulting score is not a number")
    check_error("ZADD NX GT", lambda: r.execute_command("ZADD", "zf", "NX", "GT", 1, "a"),
                "GT, LT, and/or NX options at the same time are not compatible")

    # A leaderboard: many increments, then the top 10.
    scores = {}
    with r.pipeline(transaction=False) as p:
        for i in range(2000):
            player = f"player:{(i * 7919) % 97}"
            points = (i * 31) % 17 + 1
            scores[player] = scores.get(player, 0) + points
            p.zincrby("board", points, player)
        res = p.execute()
    check("leaderboard zincrby replies", res[-1], float(scores[player]))
    top = sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]
    check("leaderboard top 10", r.zrevrange("board", 0, 9, withscores=True),
          pairs(*[(m, float(s)) for m, s in top]))
    leader = top[0][0]
    check("leader rank", r.zrevrank("board", leader), 0)
    check("leader score", r.zscore("board", leader), float(top[0][1]))
    check("board size", r.zcard("board"), len(scores))

    big = {f"zm{i}": i * 0.5 for i in range(2000)}
    r.zadd("z:big", big)
    seen = {}
    for m, s in r.zscan_iter("z:big", count=64):
        assert m not in seen, f"zscan_iter returned {m} twice"
        seen[m] = s
    check("zscan_iter", seen, {m: float(s) for m, s in big.items()})


def lists():
    check("rpush", r.rpush("l", "a", "b", "c"), 3)
    check("lpush", r.lpush("l", "y", "z"), 5)
    check("lrange", r.lrange("l", 0, -1), ["z", "y", "a", "b", "c"])
    check("llen", r.llen("l"), 5)
    check("lindex", r.lindex("l", 1), "y")
    check("lindex negative", r.lindex("l", -1), "c")
    check("lindex out of range", r.lindex("l", 9), None)
    check("lset", r.lset("l", 1, "Y"), True)
    check_error("lset missing key", lambda: r.lset("l:none", 0, "x"), "no such key")
    check("linsert missing key", r.linsert("l:none", "before", "a", "b"), 0)
    check("lpushx missing key", r.lpushx("l:none", "a"), 0)
    check("rpushx missing key", r.rpushx("l:none", "a"), 0)
    check("exists after *pushx", r.exists("l:none"), 0)
    check("rpushx", r.rpushx("l", "c2"), 6)
    check("rpop rpushx", r.rpop("l"), "c2")
    check_error("lset out of range", lambda: r.lset("l", 9, "x"), "index out of range")
    check("linsert before", r.linsert("l", "before", "a", "pre-a"), 6)
    check("linsert after", r.linsert("l", "AFTER", "c", "post-c"), 7)
    check("linsert missing pivot", r.linsert("l", "after", "nope", "x"), -1)
    check("lrange after inserts", r.lrange("l", 0, -1),
          ["z", "Y", "pre-a", "a", "b", "c", "post-c"])
    check("lpop", r.lpop("l"), "z")
    check("rpop", r.rpop("l"), "post-c")
    check("lpop count", r.lpop("l", 2), ["Y", "pre-a"])
    check("rpop count", r.rpop("l", 2), ["c", "b"])
    check("lpop count past end", r.lpop("l", 5), ["a"])
    check("exists after popping all", r.exists("l"), 0)
    check("lpop missing", r.lpop("l"), None)
    check("lpop count missing", r.lpop("l", 2), None)
    check("lrange missing", r.lrange("l", 0, -1), [])

    r.rpush("l2", *"abcabcabc")
    check("lrem from head", r.lrem("l2", 2, "a"), 2)
    check("lrem from tail", r.lrem("l2", -1, "c"), 1)
    check("lrange after lrem", r.lrange("l2", 0, -1), list("bcbcab"))
    check("lrem all", r.lrem("l2", 0, "b"), 3)
    check("lrange after lrem all", r.lrange("l2", 0, -1), list("cca"))
    r.delete("l2")
    r.rpush("l2", *[str(i) for i in range(10)])
    check("ltrim", r.ltrim("l2", 2, -3), True)
    check("lrange after ltrim", r.lrange("l2", 0, -1), [str(i) for i in range(2, 8)])
    check("lrange window", r.lrange("l2", 1, 3), ["3", "4", "5"])

    r.rpush("lp", *"abcabcabc")
    check("lpos", r.lpos("lp", "b"), 1)
    check("lpos missing", r.lpos("lp", "x"), None)
    check("lpos rank", r.lpos("lp", "b", rank=2), 4)
    check("lpos negative rank", r.lpos("lp", "b", rank=-1), 7)
    check("lpos count", r.lpos("lp", "c", count=2), [2, 5])
    check("lpos count 0", r.lpos("lp", "c", count=0), [2, 5, 8])
    check("lpos count missing", r.lpos("lp", "x", count=2), [])
    check("lpos maxlen", r.lpos("lp", "c", count=0, maxlen=6), [2, 5])
    check("lpos rank + count", r.lpos("lp", "a", rank=-2, count=2), [3, 0])
    check_error("lpos rank 0", lambda: r.lpos("lp", "a", rank=0), "RANK can't be zero")
    check("ltrim to nothing", r.ltrim("lp", 5, 2), True)
    check("exists after ltrim to nothing", r.exists("lp"), 0)

    r.rpush("src", "1", "2", "3")
    check("lmove", r.lmove("src", "dst", "LEFT", "RIGHT"), "1")
    check("lmove again", r.lmove("src", "dst", "RIGHT", "LEFT"), "3")
    check("rpoplpush", r.rpoplpush("src", "dst"), "2")
    check("src empty", r.exists("src"), 0)
    check("dst", r.lrange("dst", 0, -1), ["2", "3", "1"])
    check("rpoplpush missing", r.rpoplpush("src", "dst"), None)
    check("lmove rotate", r.lmove("dst", "dst", "LEFT", "RIGHT"), "2")
    check("dst rotated", r.lrange("dst", 0, -1), ["3", "1", "2"])

    # A job queue: a producer pushes while a consumer pops.
    jobs = [f"job:{i}" for i in range(1000)]
    done = threading.Event()
    errors = []

    def produce():
        try:
            c = client()
            for i in range(0, len(jobs), 25):
                c.rpush("queue", *jobs[i:i + 25])
            c.close()
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))
        finally:
            done.set()

    t = threading.Thread(target=produce)
    t.start()
    got = []
    deadline = time.time() + 30
    while time.time() < deadline:
        finished = done.is_set()
        batch = r.lpop("queue", 10)
        if batch is None:
            if finished:
                break
            time.sleep(0.001)
            continue
        got.extend(batch)
    t.join()
    assert not errors, errors
    check("job queue: every job once, in order", got, jobs)
    check("queue empty", r.llen("queue"), 0)


def keys():
    r.set("kind:string", "v")
    r.rpush("kind:list", "a")
    r.sadd("kind:set", "a")
    r.zadd("kind:zset", {"a": 1})
    r.hset("kind:hash", "f", "v")
    for kind in ["string", "list", "set", "zset", "hash"]:
        check(f"type {kind}", r.type(f"kind:{kind}"), kind)
    check("type none", r.type("kind:none"), "none")
    check("scan_iter match", sorted(r.scan_iter(match="kind:*", count=10)),
          [f"kind:{k}" for k in ["hash", "list", "set", "string", "zset"]])
    check("scan_iter type", sorted(r.scan_iter(match="kind:*", _type="hash")), ["kind:hash"])
    wrong = [
        ("hget on a list", lambda: r.hget("kind:list", "f")),
        ("hset on a string", lambda: r.hset("kind:string", "f", "v")),
        ("lpush on a hash", lambda: r.lpush("kind:hash", "x")),
        ("lrange on a set", lambda: r.lrange("kind:set", 0, -1)),
        ("sadd on a zset", lambda: r.sadd("kind:zset", "x")),
        ("smembers on a hash", lambda: r.smembers("kind:hash")),
        ("zadd on a set", lambda: r.zadd("kind:set", {"x": 1})),
        ("zscore on a list", lambda: r.zscore("kind:list", "a")),
        ("get on a hash", lambda: r.get("kind:hash")),
        ("incr on a list", lambda: r.incr("kind:list")),
        ("sinter with a list", lambda: r.sinter("kind:set", "kind:list")),
        ("hgetall on a zset", lambda: r.hgetall("kind:zset")),
    ]
    for what, fn in wrong:
        check_error(what, fn, "WRONGTYPE Operation against a key holding the wrong kind of value")
    check("set replaces a hash", r.set("kind:hash2", "x"), True)
    r.hset("kind:hash3", "f", "v")
    check("set over a hash", r.set("kind:hash3", "x"), True)
    check("type after set over hash", r.type("kind:hash3"), "string")
    check("get after set over hash", r.get("kind:hash3"), "x")
    check("delete composite keys",
          r.delete("kind:list", "kind:set", "kind:zset", "kind:hash", "kind:none"), 4)
    check("exists after delete", r.exists("kind:list", "kind:set", "kind:zset", "kind:hash"), 0)
    check("hgetall after delete", r.hgetall("kind:hash"), {})
    check("smembers after delete", r.smembers("kind:set"), set())
    check("zrange after delete", r.zrange("kind:zset", 0, -1), [])
    check("lrange after delete", r.lrange("kind:list", 0, -1), [])
    check("recreate after delete", r.hset("kind:hash", "g", "w"), 1)
    check("recreated hash", r.hgetall("kind:hash"), {"g": "w"})

    # Expiry on a hash.
    r.hset("eh", mapping={"a": "1", "b": "2"})
    check("ttl no expiry", r.ttl("eh"), -1)
    check("ttl missing", r.ttl("eh:none"), -2)
    check("expire", r.expire("eh", 100), True)
    ttl = r.ttl("eh")
    assert 90 <= ttl <= 100, ttl
    check("expire missing", r.expire("eh:none", 100), False)
    check("persist", r.persist("eh"), True)
    check("ttl after persist", r.ttl("eh"), -1)
    check("expire xx without ttl", r.expire("eh", 100, xx=True), False)
    check("expire nx", r.expire("eh", 100, nx=True), True)
    check("expire nx with ttl", r.expire("eh", 200, nx=True), False)
    check("expire gt lower", r.expire("eh", 50, gt=True), False)
    check("expire gt higher", r.expire("eh", 200, gt=True), True)
    check("expire lt lower", r.expire("eh", 100, lt=True), True)
    at = r.expiretime("eh")
    assert abs(at - (time.time() + 100)) <= 5, at
    check("expiretime missing", r.expiretime("eh:none"), -2)
    check("persist again", r.persist("eh"), True)
    check("expiretime no ttl", r.expiretime("eh"), -1)
    check("expire again", r.expire("eh", 100), True)
    check("hset keeps the ttl", r.hset("eh", "c", "3"), 1)
    ttl = r.ttl("eh")
    assert 90 <= ttl <= 100, ttl
    # One transaction, so a slow machine cannot let the key expire between.
    with r.pipeline() as p:
        p.pexpire("eh", 300).pttl("eh").hgetall("eh")
        ok, pttl, fields = p.execute()
    check("pexpire", ok, True)
    assert 0 < pttl <= 300, pttl
    check("still there", fields, {"a": "1", "b": "2", "c": "3"})
    deadline = time.time() + 5
    while r.exists("eh") and time.time() < deadline:
        time.sleep(0.05)
    check("expired hash is gone", r.exists("eh"), 0)
    check("hgetall expired", r.hgetall("eh"), {})
    check("hlen expired", r.hlen("eh"), 0)
    check("hget expired", r.hget("eh", "a"), None)
    check("type expired", r.type("eh"), "none")
    check("ttl expired", r.ttl("eh"), -2)
    check("hset after expiry starts fresh", r.hset("eh", "z", "1"), 1)
    check("fresh hash", r.hgetall("eh"), {"z": "1"})
    check("fresh hash ttl", r.ttl("eh"), -1)
    # Expiry on the other composite kinds.
    r.sadd("es", "a")
    r.zadd("ez", {"a": 1})
    r.rpush("el", "a")
    for k in ["es", "ez", "el"]:
        check(f"pexpire {k}", r.pexpire(k, 100), True)
    time.sleep(0.3)
    check("expired set/zset/list are gone", r.exists("es", "ez", "el"), 0)
    check("smembers expired", r.smembers("es"), set())
    check("zcard expired", r.zcard("ez"), 0)
    check("llen expired", r.llen("el"), 0)


def binary():
    b = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, **kwargs)
    value = bytes(range(256))
    check("binary set", b.set(b"bin:\x00\xff", value), True)
    check("binary get", b.get(b"bin:\x00\xff"), value)
    check("binary hset", b.hset("bin:h", mapping={b"\x00f": b"\xff\x00"}), 1)
    check("binary hgetall", b.hgetall("bin:h"), {b"\x00f": b"\xff\x00"})
    check("binary smembers", (b.sadd("bin:s", b"\x00", b"\xff"), b.smembers("bin:s")),
          (2, {b"\x00", b"\xff"}))
    b.close()


start = time.time()
for part in [pipelines, watch, transactions, hashes, sets, zsets, lists, keys, binary]:
    t0 = time.time()
    part()
    print(f"{part.__name__}: ok ({time.time() - t0:.2f}s)")
check("dbsize sanity", r.dbsize() > 0, True)
print(f"all ok in {time.time() - start:.2f}s (redis-py {redis.__version__}, mode {mode})")
"#;
