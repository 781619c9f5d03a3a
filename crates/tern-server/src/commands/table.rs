//! The command table: names, arities, flags and key positions, and the
//! function that runs each command; and `COMMAND`, which reports the table.

use super::server::{help, unknown_subcommand};
use super::{
    bits, config, hashes, info, keys, lcs, lists, multi, object, rename, server, sets, strings,
    wrong_arity, zsets, Ctx, Handler,
};
use crate::resp::Reply;

/// One command.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: exact argument count including the name, or `-n` for
    /// at least `n`.
    pub arity: i64,
    /// Flags as in `COMMAND INFO`.
    pub flags: &'static [&'static str],
    /// Position of the first key (0: none).
    pub first_key: i64,
    /// Position of the last key (-1: the last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
    /// Command group (`COMMAND DOCS`).
    pub group: &'static str,
    /// One-line description (`COMMAND DOCS`).
    pub summary: &'static str,
    /// Redis version that introduced it (`COMMAND DOCS`).
    pub since: &'static str,
    /// The implementation.
    pub handler: Handler,
}

const R: &[&str] = &["readonly", "fast"];
const RS: &[&str] = &["readonly"];
const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const WD: &[&str] = &["write", "fast"];
const WS: &[&str] = &["write"];
const C: &[&str] = &["fast"];
const RSM: &[&str] = &["readonly", "movablekeys"];
const TX: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const TX_EXEC: &[&str] = &["noscript", "loading", "stale", "skip_slowlog"];
const NOAUTH: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "allow_busy",
];

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, $fk:expr, $lk:expr, $st:expr, $group:literal, $since:literal, $summary:literal, $h:path) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $fk,
            last_key: $lk,
            step: $st,
            group: $group,
            since: $since,
            summary: $summary,
            handler: $h,
        }
    };
}

/// Every command the server knows.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("get", 2, R, 1, 1, 1, "string", "1.0.0", "Returns the string value of a key.", strings::get),
    cmd!("set", -3, W, 1, 1, 1, "string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", strings::set),
    cmd!("setnx", 3, WF, 1, 1, 1, "string", "1.0.0", "Set the string value of a key only when the key doesn't exist.", strings::setnx),
    cmd!("setex", 4, W, 1, 1, 1, "string", "2.0.0", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", strings::setex),
    cmd!("psetex", 4, W, 1, 1, 1, "string", "2.6.0", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", strings::psetex),
    cmd!("getset", 3, WF, 1, 1, 1, "string", "1.0.0", "Returns the previous string value of a key after setting it to a new value.", strings::getset),
    cmd!("getdel", 2, WD, 1, 1, 1, "string", "6.2.0", "Returns the string value of a key after deleting the key.", strings::getdel),
    cmd!("getex", -2, WD, 1, 1, 1, "string", "6.2.0", "Returns the string value of a key after setting its expiration time.", strings::getex),
    cmd!("mget", -2, R, 1, -1, 1, "string", "1.0.0", "Atomically returns the string values of one or more keys.", strings::mget),
    cmd!("mset", -3, W, 1, -1, 2, "string", "1.0.1", "Atomically creates or modifies the string values of one or more keys.", strings::mset),
    cmd!("msetnx", -3, W, 1, -1, 2, "string", "1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist.", strings::msetnx),
    cmd!("incr", 2, WF, 1, 1, 1, "string", "1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", strings::incr),
    cmd!("incrby", 3, WF, 1, 1, 1, "string", "1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", strings::incrby),
    cmd!("decr", 2, WF, 1, 1, 1, "string", "1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", strings::decr),
    cmd!("decrby", 3, WF, 1, 1, 1, "string", "1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", strings::decrby),
    cmd!("incrbyfloat", 3, WF, 1, 1, 1, "string", "2.6.0", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", strings::incrbyfloat),
    cmd!("append", 3, WF, 1, 1, 1, "string", "2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist.", strings::append),
    cmd!("strlen", 2, R, 1, 1, 1, "string", "2.2.0", "Returns the length of a string value.", strings::strlen),
    cmd!("getrange", 4, RS, 1, 1, 1, "string", "2.4.0", "Returns a substring of the string stored at a key.", strings::getrange),
    cmd!("substr", 4, RS, 1, 1, 1, "string", "1.0.0", "Returns a substring from a string value.", strings::getrange),
    cmd!("setrange", 4, W, 1, 1, 1, "string", "2.2.0", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", strings::setrange),
    cmd!("setbit", 4, W, 1, 1, 1, "bitmap", "2.2.0", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", bits::setbit),
    cmd!("getbit", 3, R, 1, 1, 1, "bitmap", "2.2.0", "Returns a bit value by offset.", bits::getbit),
    cmd!("bitcount", -2, RS, 1, 1, 1, "bitmap", "2.6.0", "Counts the number of set bits (population counting) in a string.", bits::bitcount),
    cmd!("bitpos", -3, RS, 1, 1, 1, "bitmap", "2.8.7", "Finds the first set (1) or clear (0) bit in a string.", bits::bitpos),
    cmd!("bitop", -4, W, 2, -1, 1, "bitmap", "2.6.0", "Performs bitwise operations on multiple strings, and stores the result.", bits::bitop),
    cmd!("bitfield", -2, W, 1, 1, 1, "bitmap", "3.2.0", "Performs arbitrary bitfield integer operations on strings.", bits::bitfield),
    cmd!("bitfield_ro", -2, R, 1, 1, 1, "bitmap", "6.0.0", "Performs arbitrary read-only bitfield integer operations on strings.", bits::bitfield_ro),
    cmd!("lcs", -3, RS, 1, 2, 1, "string", "7.0.0", "Finds the longest common substring.", lcs::lcs),
    cmd!("hset", -4, WF, 1, 1, 1, "hash", "2.0.0", "Creates or modifies the value of a field in a hash.", hashes::hset),
    cmd!("hsetnx", 4, WF, 1, 1, 1, "hash", "2.0.0", "Sets the value of a field in a hash only when the field doesn't exist.", hashes::hsetnx),
    cmd!("hmset", -4, WF, 1, 1, 1, "hash", "2.0.0", "Sets the values of multiple fields.", hashes::hmset),
    cmd!("hget", 3, R, 1, 1, 1, "hash", "2.0.0", "Returns the value of a field in a hash.", hashes::hget),
    cmd!("hmget", -3, R, 1, 1, 1, "hash", "2.0.0", "Returns the values of all fields in a hash.", hashes::hmget),
    cmd!("hgetall", 2, RS, 1, 1, 1, "hash", "2.0.0", "Returns all fields and values in a hash.", hashes::hgetall),
    cmd!("hdel", -3, WD, 1, 1, 1, "hash", "2.0.0", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", hashes::hdel),
    cmd!("hlen", 2, R, 1, 1, 1, "hash", "2.0.0", "Returns the number of fields in a hash.", hashes::hlen),
    cmd!("hexists", 3, R, 1, 1, 1, "hash", "2.0.0", "Determines whether a field exists in a hash.", hashes::hexists),
    cmd!("hkeys", 2, RS, 1, 1, 1, "hash", "2.0.0", "Returns all fields in a hash.", hashes::hkeys),
    cmd!("hvals", 2, RS, 1, 1, 1, "hash", "2.0.0", "Returns all values in a hash.", hashes::hvals),
    cmd!("hincrby", 4, WF, 1, 1, 1, "hash", "2.0.0", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", hashes::hincrby),
    cmd!("hincrbyfloat", 4, WF, 1, 1, 1, "hash", "2.6.0", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", hashes::hincrbyfloat),
    cmd!("hstrlen", 3, R, 1, 1, 1, "hash", "3.2.0", "Returns the length of the value of a field.", hashes::hstrlen),
    cmd!("hscan", -3, RS, 1, 1, 1, "hash", "2.8.0", "Iterates over fields and values of a hash.", hashes::hscan),
    cmd!("hrandfield", -2, RS, 1, 1, 1, "hash", "6.2.0", "Returns one or more random fields from a hash.", hashes::hrandfield),
    cmd!("sadd", -3, WF, 1, 1, 1, "set", "1.0.0", "Adds one or more members to a set. Creates the key if it doesn't exist.", sets::sadd),
    cmd!("srem", -3, WD, 1, 1, 1, "set", "1.0.0", "Removes one or more members from a set. Deletes the set if the last member was removed.", sets::srem),
    cmd!("sismember", 3, R, 1, 1, 1, "set", "1.0.0", "Determines whether a member belongs to a set.", sets::sismember),
    cmd!("smismember", -3, R, 1, 1, 1, "set", "6.2.0", "Determines whether multiple members belong to a set.", sets::smismember),
    cmd!("scard", 2, R, 1, 1, 1, "set", "1.0.0", "Returns the number of members in a set.", sets::scard),
    cmd!("smembers", 2, RS, 1, 1, 1, "set", "1.0.0", "Returns all members of a set.", sets::smembers),
    cmd!("spop", -2, WD, 1, 1, 1, "set", "1.0.0", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.", sets::spop),
    cmd!("srandmember", -2, RS, 1, 1, 1, "set", "1.0.0", "Get one or multiple random members from a set", sets::srandmember),
    cmd!("smove", 4, WF, 1, 2, 1, "set", "1.0.0", "Moves a member from one set to another.", sets::smove),
    cmd!("sinter", -2, RS, 1, -1, 1, "set", "1.0.0", "Returns the intersect of multiple sets.", sets::sinter),
    cmd!("sunion", -2, RS, 1, -1, 1, "set", "1.0.0", "Returns the union of multiple sets.", sets::sunion),
    cmd!("sdiff", -2, RS, 1, -1, 1, "set", "1.0.0", "Returns the difference of multiple sets.", sets::sdiff),
    cmd!("sinterstore", -3, W, 1, -1, 1, "set", "1.0.0", "Stores the intersect of multiple sets in a key.", sets::sinterstore),
    cmd!("sunionstore", -3, W, 1, -1, 1, "set", "1.0.0", "Stores the union of multiple sets in a key.", sets::sunionstore),
    cmd!("sdiffstore", -3, W, 1, -1, 1, "set", "1.0.0", "Stores the difference of multiple sets in a key.", sets::sdiffstore),
    cmd!("sintercard", -3, RSM, 0, 0, 0, "set", "7.0.0", "Returns the number of members of the intersect of multiple sets.", sets::sintercard),
    cmd!("sscan", -3, RS, 1, 1, 1, "set", "2.8.0", "Iterates over members of a set.", sets::sscan),
    cmd!("lpush", -3, WF, 1, 1, 1, "list", "1.0.0", "Prepends one or more elements to a list. Creates the key if it doesn't exist.", lists::lpush),
    cmd!("rpush", -3, WF, 1, 1, 1, "list", "1.0.0", "Appends one or more elements to a list. Creates the key if it doesn't exist.", lists::rpush),
    cmd!("lpushx", -3, WF, 1, 1, 1, "list", "2.2.0", "Prepends one or more elements to a list only when the list exists.", lists::lpushx),
    cmd!("rpushx", -3, WF, 1, 1, 1, "list", "2.2.0", "Appends an element to a list only when the list exists.", lists::rpushx),
    cmd!("lpop", -2, WD, 1, 1, 1, "list", "1.0.0", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", lists::lpop),
    cmd!("rpop", -2, WD, 1, 1, 1, "list", "1.0.0", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", lists::rpop),
    cmd!("llen", 2, R, 1, 1, 1, "list", "1.0.0", "Returns the length of a list.", lists::llen),
    cmd!("lrange", 4, RS, 1, 1, 1, "list", "1.0.0", "Returns a range of elements from a list.", lists::lrange),
    cmd!("lindex", 3, RS, 1, 1, 1, "list", "1.0.0", "Returns an element from a list by its index.", lists::lindex),
    cmd!("lset", 4, W, 1, 1, 1, "list", "1.0.0", "Sets the value of an element in a list by its index.", lists::lset),
    cmd!("ltrim", 4, WS, 1, 1, 1, "list", "1.0.0", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", lists::ltrim),
    cmd!("lrem", 4, WS, 1, 1, 1, "list", "1.0.0", "Removes elements from a list. Deletes the list if the last element was removed.", lists::lrem),
    cmd!("linsert", 5, W, 1, 1, 1, "list", "2.2.0", "Inserts an element before or after another element in a list.", lists::linsert),
    cmd!("lpos", -3, RS, 1, 1, 1, "list", "6.0.6", "Returns the index of matching elements in a list.", lists::lpos),
    cmd!("lmove", 5, W, 1, 2, 1, "list", "6.2.0", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.", lists::lmove),
    cmd!("rpoplpush", 3, W, 1, 2, 1, "list", "1.2.0", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.", lists::rpoplpush),
    cmd!("zadd", -4, WF, 1, 1, 1, "sorted-set", "1.2.0", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", zsets::zadd),
    cmd!("zincrby", 4, WF, 1, 1, 1, "sorted-set", "1.2.0", "Increments the score of a member in a sorted set.", zsets::zincrby),
    cmd!("zrem", -3, WD, 1, 1, 1, "sorted-set", "1.2.0", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", zsets::zrem),
    cmd!("zscore", 3, R, 1, 1, 1, "sorted-set", "1.2.0", "Returns the score of a member in a sorted set.", zsets::zscore),
    cmd!("zmscore", -3, R, 1, 1, 1, "sorted-set", "6.2.0", "Returns the score of one or more members in a sorted set.", zsets::zmscore),
    cmd!("zcard", 2, R, 1, 1, 1, "sorted-set", "1.2.0", "Returns the number of members in a sorted set.", zsets::zcard),
    cmd!("zcount", 4, RS, 1, 1, 1, "sorted-set", "2.0.0", "Returns the count of members in a sorted set that have scores within a range.", zsets::zcount),
    cmd!("zrange", -4, RS, 1, 1, 1, "sorted-set", "1.2.0", "Returns members in a sorted set within a range of indexes.", zsets::zrange),
    cmd!("zrangebyscore", -4, RS, 1, 1, 1, "sorted-set", "1.0.5", "Returns members in a sorted set within a range of scores.", zsets::zrangebyscore),
    cmd!("zrevrange", -4, RS, 1, 1, 1, "sorted-set", "1.2.0", "Returns members in a sorted set within a range of indexes in reverse order.", zsets::zrevrange),
    cmd!("zrevrangebyscore", -4, RS, 1, 1, 1, "sorted-set", "2.2.0", "Returns members in a sorted set within a range of scores in reverse order.", zsets::zrevrangebyscore),
    cmd!("zrangebylex", -4, RS, 1, 1, 1, "sorted-set", "2.8.9", "Returns members in a sorted set within a lexicographical range.", zsets::zrangebylex),
    cmd!("zrevrangebylex", -4, RS, 1, 1, 1, "sorted-set", "2.8.9", "Returns members in a sorted set within a lexicographical range in reverse order.", zsets::zrevrangebylex),
    cmd!("zrank", 3, RS, 1, 1, 1, "sorted-set", "2.0.0", "Returns the index of a member in a sorted set ordered by ascending scores.", zsets::zrank),
    cmd!("zrevrank", 3, RS, 1, 1, 1, "sorted-set", "2.0.0", "Returns the index of a member in a sorted set ordered by descending scores.", zsets::zrevrank),
    cmd!("zpopmin", -2, WD, 1, 1, 1, "sorted-set", "5.0.0", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zsets::zpopmin),
    cmd!("zpopmax", -2, WD, 1, 1, 1, "sorted-set", "5.0.0", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zsets::zpopmax),
    cmd!("zremrangebyscore", 4, WS, 1, 1, 1, "sorted-set", "1.2.0", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", zsets::zremrangebyscore),
    cmd!("zremrangebyrank", 4, WS, 1, 1, 1, "sorted-set", "2.0.0", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", zsets::zremrangebyrank),
    cmd!("zscan", -3, RS, 1, 1, 1, "sorted-set", "2.8.0", "Iterates over members and scores of a sorted set.", zsets::zscan),
    cmd!("multi", 1, TX, 0, 0, 0, "transactions", "1.2.0", "Starts a transaction.", multi::multi),
    cmd!("exec", 1, TX_EXEC, 0, 0, 0, "transactions", "1.2.0", "Executes all commands in a transaction.", multi::exec),
    cmd!("discard", 1, TX, 0, 0, 0, "transactions", "2.0.0", "Discards a transaction.", multi::discard),
    cmd!("watch", -2, TX, 1, -1, 1, "transactions", "2.2.0", "Monitors changes to keys to determine the execution of a transaction.", multi::watch),
    cmd!("unwatch", 1, TX, 0, 0, 0, "transactions", "2.2.0", "Forgets about watched keys of a transaction.", multi::unwatch),
    cmd!("del", -2, WS, 1, -1, 1, "generic", "1.0.0", "Deletes one or more keys.", keys::del),
    cmd!("unlink", -2, WD, 1, -1, 1, "generic", "4.0.0", "Asynchronously deletes one or more keys.", keys::del),
    cmd!("exists", -2, R, 1, -1, 1, "generic", "1.0.0", "Determines whether one or more keys exist.", keys::exists),
    cmd!("expire", -3, WD, 1, 1, 1, "generic", "1.0.0", "Sets the expiration time of a key in seconds.", keys::expire),
    cmd!("pexpire", -3, WD, 1, 1, 1, "generic", "2.6.0", "Sets the expiration time of a key in milliseconds.", keys::pexpire),
    cmd!("expireat", -3, WD, 1, 1, 1, "generic", "1.2.0", "Sets the expiration time of a key to a Unix timestamp.", keys::expireat),
    cmd!("pexpireat", -3, WD, 1, 1, 1, "generic", "2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp.", keys::pexpireat),
    cmd!("expiretime", 2, R, 1, 1, 1, "generic", "7.0.0", "Returns the expiration time of a key as a Unix timestamp.", keys::expiretime),
    cmd!("pexpiretime", 2, R, 1, 1, 1, "generic", "7.0.0", "Returns the expiration time of a key as a Unix milliseconds timestamp.", keys::pexpiretime),
    cmd!("ttl", 2, R, 1, 1, 1, "generic", "1.0.0", "Returns the expiration time in seconds of a key.", keys::ttl),
    cmd!("pttl", 2, R, 1, 1, 1, "generic", "2.6.0", "Returns the expiration time in milliseconds of a key.", keys::pttl),
    cmd!("persist", 2, WD, 1, 1, 1, "generic", "2.2.0", "Removes the expiration time of a key.", keys::persist),
    cmd!("type", 2, R, 1, 1, 1, "generic", "1.0.0", "Determines the type of value stored at a key.", keys::type_),
    cmd!("rename", 3, WS, 1, 2, 1, "generic", "1.0.0", "Renames a key and overwrites the destination.", rename::rename),
    cmd!("renamenx", 3, WF, 1, 2, 1, "generic", "1.0.0", "Renames a key only when the target key name doesn't exist.", rename::renamenx),
    cmd!("copy", -3, W, 1, 2, 1, "generic", "6.2.0", "Copies the value of a key to a new key.", rename::copy),
    cmd!("touch", -2, R, 1, -1, 1, "generic", "3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", keys::touch),
    cmd!("object", -2, RS, 2, 2, 1, "generic", "2.2.3", "A container for object introspection commands.", object::object),
    cmd!("scan", -2, RS, 0, 0, 0, "generic", "2.8.0", "Iterates over the key names in the database.", keys::scan),
    cmd!("keys", 2, RS, 0, 0, 0, "generic", "1.0.0", "Returns all key names that match a pattern.", keys::keys),
    cmd!("dbsize", 1, R, 0, 0, 0, "server", "1.0.0", "Returns the number of keys in the database.", keys::dbsize),
    cmd!("flushdb", -1, WS, 0, 0, 0, "server", "1.0.0", "Remove all keys from the current database.", keys::flushdb),
    cmd!("flushall", -1, WS, 0, 0, 0, "server", "1.0.0", "Removes all keys from all databases.", keys::flushdb),
    cmd!("randomkey", 1, RS, 0, 0, 0, "generic", "1.0.0", "Returns a random key name from the database.", keys::randomkey),
    cmd!("time", 1, &["loading", "stale", "fast"], 0, 0, 0, "server", "2.6.0", "Returns the server time.", server::time),
    cmd!("ping", -1, C, 0, 0, 0, "connection", "1.0.0", "Returns the server's liveliness response.", server::ping),
    cmd!("echo", 2, C, 0, 0, 0, "connection", "1.0.0", "Returns the given string.", server::echo),
    cmd!("hello", -1, NOAUTH, 0, 0, 0, "connection", "6.0.0", "Handshakes with the Redis server.", server::hello),
    cmd!("auth", -2, NOAUTH, 0, 0, 0, "connection", "1.0.0", "Authenticates the connection.", server::auth),
    cmd!("select", 2, C, 0, 0, 0, "connection", "1.0.0", "Changes the selected database.", server::select),
    cmd!("debug", -2, &["admin", "noscript", "loading", "stale"], 0, 0, 0, "server", "1.0.0", "A container for debugging commands.", server::debug),
    cmd!("info", -1, &["loading", "stale"], 0, 0, 0, "server", "1.0.0", "Returns information and statistics about the server.", info::info),
    cmd!("config", -2, &[], 0, 0, 0, "server", "2.0.0", "A container for server configuration commands.", config::config),
    cmd!("client", -2, &[], 0, 0, 0, "connection", "2.4.0", "A container for client connection commands.", server::client),
    cmd!("command", -1, &["loading", "stale"], 0, 0, 0, "server", "2.8.13", "Returns detailed information about all commands.", command),
    cmd!("cluster", -2, &["stale"], 0, 0, 0, "cluster", "3.0.0", "A container for Redis Cluster commands.", super::cluster::cluster),
    cmd!("asking", 1, C, 0, 0, 0, "cluster", "3.0.0", "Signals that a cluster client is following an -ASK redirect.", super::cluster::asking),
    cmd!("readonly", 1, C, 0, 0, 0, "cluster", "3.0.0", "Enables read-only queries for a connection to a Redis Cluster replica node.", super::cluster::readonly),
    cmd!("readwrite", 1, C, 0, 0, 0, "cluster", "3.0.0", "Enables read-write queries for a connection to a Redis Cluster replica node.", super::cluster::readonly),
    cmd!("tern.fetch", -2, RS, 0, 0, 0, "cluster", "0.1.0", "Returns keys' values and expiries to a node importing their slot (internal).", super::migrate::fetch),
    cmd!("tern.slotscan", 4, RS, 0, 0, 0, "cluster", "0.1.0", "Returns one page of a slot's records to a node importing it (internal).", super::migrate::slotscan),
    cmd!("tern.hotkeys", -4, RS, 0, 0, 0, "cluster", "0.1.0", "Returns the hottest records of slot ranges to their next owner (internal).", super::migrate::hotkeys),
    cmd!("tern.export", 8, RS, 0, 0, 0, "cluster", "0.1.0", "Returns part of slots' string values as table and blob files for a node importing them (internal).", super::ingest::export),
    cmd!("tern.exportcomposites", 9, RS, 0, 0, 0, "cluster", "0.1.0", "Returns the hashes, sets, sorted sets and lists of whole slots as table and blob files for a node importing them (internal).", super::ingest::export_composites),
    cmd!("tern.reserveversions", 2, WS, 0, 0, 0, "cluster", "0.1.0", "Reserves composite value versions for a bulk copy's files (internal).", super::ingest::reserve_versions),
    cmd!("tern.ingestbegin", 2, WS, 0, 0, 0, "cluster", "0.1.0", "Holds a bulk copy's slots and counts its new keys before its files are ingested (internal).", super::ingest::begin),
    cmd!("tern.ingestend", 3, WS, 0, 0, 0, "cluster", "0.1.0", "Finishes or takes back a bulk copy's ingest and releases its slots (internal).", super::ingest::end),
    cmd!("tern.import", -4, WS, 0, 0, 0, "cluster", "0.1.0", "Stores migrated records a client has not overwritten here (internal).", super::migrate::import),
    cmd!("tern.dropslot", 3, WS, 0, 0, 0, "cluster", "0.1.0", "Deletes keys of a slot that moved away (internal).", super::migrate::dropslot),
    cmd!("tern.resetslot", 3, WS, 0, 0, 0, "cluster", "0.1.0", "Deletes what a target holds of a slot in handoff to it (internal).", super::migrate::resetslot),
    cmd!("tern.clearmarks", 3, WS, 0, 0, 0, "cluster", "0.1.0", "Deletes import markers of a slot no longer being imported (internal).", super::migrate::clearmarks),
    cmd!("quit", -1, NOAUTH, 0, 0, 0, "connection", "1.0.0", "Closes the connection.", server::quit),
    cmd!("shutdown", -1, &["admin", "noscript", "loading", "stale", "no_async_loading"], 0, 0, 0, "server", "1.0.0", "Synchronously saves the database(s) to disk and shuts down the Redis server.", server::shutdown),
];

/// Index in [`COMMANDS`] of the command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<usize> {
    BY_SHAPE[shape(name)]
        .iter()
        .map(|&i| usize::from(i))
        .find(|&i| COMMANDS[i].name.as_bytes().eq_ignore_ascii_case(name))
}

/// Indexes into [`COMMANDS`] by [`shape`]: a lookup compares the one to
/// three names of its shape, not the whole table (every request looks its
/// command up).
static BY_SHAPE: std::sync::LazyLock<Vec<Vec<u16>>> = std::sync::LazyLock::new(|| {
    let mut by_shape = vec![Vec::new(); 32 * 32];
    for (i, c) in COMMANDS.iter().enumerate() {
        let i = u16::try_from(i).unwrap_or(u16::MAX);
        by_shape[shape(c.name.as_bytes())].push(i);
    }
    by_shape
});

/// A name's length and first letter, case-blind, in `0..1024`.
fn shape(name: &[u8]) -> usize {
    let first = name.first().map_or(0, |&c| c & 31);
    (name.len() & 31) * 32 + usize::from(first)
}

/// Whether `arity` accepts `argc` arguments (the name included).
pub fn arity_ok(arity: i64, argc: usize) -> bool {
    let argc = argc as i64;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

fn acl_categories(spec: &CommandSpec) -> Vec<Reply> {
    let mut cats = Vec::new();
    let f = |n: &str| spec.flags.contains(&n);
    if f("write") {
        cats.push("@write");
    }
    if f("readonly") {
        cats.push("@read");
    }
    match spec.group {
        "string" => cats.push("@string"),
        "hash" => cats.push("@hash"),
        "set" => cats.push("@set"),
        "list" => cats.push("@list"),
        "bitmap" => cats.push("@bitmap"),
        "sorted-set" => cats.push("@sortedset"),
        "generic" => cats.push("@keyspace"),
        "connection" => cats.push("@connection"),
        _ => {}
    }
    if f("fast") {
        cats.push("@fast");
    } else {
        cats.push("@slow");
    }
    if spec.group == "server" && spec.first_key == 0 && f("write") {
        cats.push("@dangerous");
    }
    cats.into_iter().map(|c| Reply::Simple(c.into())).collect()
}

fn command_info(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::text(spec.name),
        Reply::Int(spec.arity),
        Reply::Set(
            spec.flags
                .iter()
                .map(|f| Reply::Simple((*f).into()))
                .collect(),
        ),
        Reply::Int(spec.first_key),
        Reply::Int(spec.last_key),
        Reply::Int(spec.step),
        Reply::Set(acl_categories(spec)),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

fn command_docs(spec: &CommandSpec) -> Reply {
    Reply::Map(vec![
        (Reply::text("summary"), Reply::text(spec.summary)),
        (Reply::text("since"), Reply::text(spec.since)),
        (Reply::text("group"), Reply::text(spec.group)),
        (Reply::text("complexity"), Reply::text("O(1)")),
        (Reply::text("arguments"), Reply::Array(Vec::new())),
    ])
}

fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    lookup(name).map(|i| &COMMANDS[i])
}

/// COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | LIST | HELP]
pub fn command(_ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(sub) = args.get(1).map(|s| s.to_ascii_lowercase()) else {
        return Reply::Array(COMMANDS.iter().map(command_info).collect());
    };
    match sub.as_slice() {
        b"count" if args.len() != 2 => wrong_arity("command|count"),
        b"count" => Reply::Int(COMMANDS.len() as i64),
        b"help" if args.len() != 2 => wrong_arity("command|help"),
        b"list" => Reply::Array(COMMANDS.iter().map(|c| Reply::text(c.name)).collect()),
        b"info" if args.len() == 2 => Reply::Array(COMMANDS.iter().map(command_info).collect()),
        b"info" => Reply::Array(
            args[2..]
                .iter()
                .map(|n| find(n).map_or(Reply::Nil, command_info))
                .collect(),
        ),
        b"docs" => {
            let specs: Vec<&CommandSpec> = if args.len() == 2 {
                COMMANDS.iter().collect()
            } else {
                args[2..].iter().filter_map(|n| find(n)).collect()
            };
            Reply::Map(
                specs
                    .into_iter()
                    .map(|s| (Reply::text(s.name), command_docs(s)))
                    .collect(),
            )
        }
        b"help" => help(&[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "HELP",
            "    Print this help.",
        ]),
        _ => unknown_subcommand(&args[1], "COMMAND"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(lookup(c.name.as_bytes()), Some(i), "{}", c.name);
            let upper = c.name.to_ascii_uppercase();
            assert_eq!(lookup(upper.as_bytes()), Some(i), "{upper}");
            let mixed: String = c
                .name
                .chars()
                .enumerate()
                .map(|(n, ch)| {
                    if n % 2 == 0 {
                        ch.to_ascii_uppercase()
                    } else {
                        ch
                    }
                })
                .collect();
            assert_eq!(lookup(mixed.as_bytes()), Some(i), "{mixed}");
        }
    }

    #[test]
    fn names_not_in_the_table_are_not_found() {
        // Same shape as GET and SET; a prefix; empty; 32 and more bytes
        // (whose shape wraps onto short names'); not letters at all.
        let long = "g".repeat(35);
        for name in [
            "gex", "sex", "ge", "", "getx", &long, "\u{1}et", "@et", "tern.",
        ] {
            assert_eq!(lookup(name.as_bytes()), None, "{name:?}");
        }
        // A name that differs from one in the table only past the shape.
        assert_eq!(lookup(b"mgex"), None);
        assert!(lookup(b"mget").is_some());
    }
}
