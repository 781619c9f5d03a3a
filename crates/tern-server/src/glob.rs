//! Redis glob-style patterns (`KEYS`, `SCAN MATCH`, `CONFIG GET`): `*`, `?`,
//! `[abc]`, `[^a-z]`, and `\` escapes, as Redis's `stringmatchlen`.

/// Whether `s` matches `pattern`.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let p = pattern;
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    let (matched, next) = class(p, pi, s[si]);
                    if matched {
                        pi = next;
                        si += 1;
                        continue;
                    }
                }
                b'\\' => {
                    let (lit, next) = if pi + 1 < p.len() {
                        (p[pi + 1], pi + 2)
                    } else {
                        (b'\\', pi + 1)
                    };
                    if lit == s[si] {
                        pi = next;
                        si += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[si] {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Matches `c` against the class starting at `p[start] == '['`; returns
/// whether it matched and the pattern position after the class.
fn class(p: &[u8], start: usize, c: u8) -> (bool, usize) {
    let mut i = start + 1;
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut m = false;
    while i < p.len() {
        if p[i] == b'\\' && i + 1 < p.len() {
            m |= p[i + 1] == c;
            i += 2;
        } else if p[i] == b']' {
            i += 1;
            return (m != not, i);
        } else if i + 2 < p.len() && p[i + 1] == b'-' {
            let (a, b) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
            m |= a <= c && c <= b;
            i += 3;
        } else {
            m |= p[i] == c;
            i += 1;
        }
    }
    (m != not, i)
}

#[cfg(test)]
mod tests {
    use super::glob_match as g;

    #[test]
    fn patterns() {
        assert!(g(b"*", b""));
        assert!(g(b"*", b"abc"));
        assert!(g(b"h?llo", b"hello"));
        assert!(!g(b"h?llo", b"hllo"));
        assert!(g(b"h*llo", b"heeeello"));
        assert!(g(b"h[ae]llo", b"hallo"));
        assert!(!g(b"h[^e]llo", b"hello"));
        assert!(g(b"h[a-b]llo", b"hbllo"));
        assert!(g(b"h[b-a]llo", b"hbllo"));
        assert!(g(b"a\\*b", b"a*b"));
        assert!(!g(b"a\\*b", b"axb"));
        assert!(g(b"key:*:x", b"key:1:2:x"));
        assert!(!g(b"key:*:x", b"key:1:2:y"));
        assert!(g(b"*a*a*a*b", b"aaaaaaaaab"));
        assert!(!g(b"*a*a*a*b", b"aaaaaaaaaa"));
        assert!(g(b"[abc", b"b"));
    }
}
