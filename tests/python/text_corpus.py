"""The varied text set the tokenizer parity tests run: scripts, code, emoji, whitespace, digits, special tokens,
long words, local files and seeded random strings (as bytes, some of them invalid UTF-8)."""
import glob
import gzip
import random

CODE = [
    'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
    '#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;  // double\n\treturn v[0] != 2;\n}\n',
    'fn main() {\n    let s: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", s);\n}\n',
    'const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); return x ?? null; };\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("héllo, 世界")\n}\n',
    'SELECT id, COUNT(*) AS n FROM users WHERE name LIKE \'%o\'\'neil%\' GROUP BY id HAVING n > 10;\n',
    '<html>\r\n  <body class="x">\r\n    <p>It\'s &amp; &lt;ok&gt;</p>\r\n  </body>\r\n</html>\r\n',
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n\\t"}}',
    '#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo "$f" | tr a-z A-Z >> out.log; done\n',
    'x = [i**2 for i in range(100) if i % 3 == 0]  # squares\n\n\n\n    return    x\n',
]
SCRIPTS = [
    "日本語のテキストです。東京は日本の首都です。", "中文文本，包括标点符号：“你好”！", "한국어 텍스트입니다. 안녕하세요?",
    "النص العربي مع الأرقام ١٢٣٤ والتشكيل: مَرْحَبًا", "हिन्दी पाठ: नमस्ते, आप कैसे हैं? क्षत्रिय", "עברית: שָׁלוֹם עולם",
    "Русский текст: Съешь же ещё этих мягких французских булок.", "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία",
    "ภาษาไทย สวัสดีครับ", "Tiếng Việt có dấu: Nguyễn Thị Minh Khai", "Ąžuolas ėjo į mokyklą", "ᚠᛇᚻ᛫ᛒᛦᚦ",
]
EMOJI = [
    "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇯🇵🇫🇷🇺🇸", "1️⃣2️⃣#️⃣", "🧑🏿‍🚀 astronaut", "❤️‍🔥",
    "emoji at end 😀", "😀😃😄😁😆😅🤣😂🙂🙃", "👩🏻‍❤️‍💋‍👨🏼",
]
COMBINING = [
    "e\u0301 vs \u00e9", "Z\u0324\u033a\u0326\u0324\u0330\u0320\u0353\u0348\u031d\u0339\u0345algo", "a\u0308\u0301\u0323",
    "\u1100\u1161\u11a8 jamo", "ﬁ ligature ﬀ", "Å Å Å", "\u0915\u094d\u0937", "ǅ ǈ ǋ titlecase",
]
WHITESPACE = [
    "", " ", "  ", "   leading", "trailing   ", "\t\ttabs\t", "\n", "\n\n\n", "a  \n  b", "line\r\nline\r\n", "\r\r\n\n",
    "non\u00a0breaking", "ideographic\u3000space", "thin\u2009space", "next\u0085line", "zero\u200bwidth",
    "mongolian\u180evowel", "  \n\t \n", "word \n\n  word", "a\u2028b\u2029c", "\u000b\u000c vt ff", "end \n",
]
DIGITS = [
    "1234567890", "3.14159265358979", "1,000,000.00", "٣٤٥ arabic-indic", "１２３ fullwidth", "x1y22z333w4444",
    "2024-01-01T12:34:56Z", "0x1F600 0b1010", "Ⅻ roman", "½ ¾ ²³",
]
APOSTROPHES = [
    "don't DON'T Don'T", "I'LL we'll YOU'VE they'Re", "it's IT'S it’s", "'s 's 'S", "O'Neil's", "he'd she'D",
    "rock 'n' roll", "'ll'll'll", "'ſ long s", "'\u212a kelvin",
]
SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start|><|im_start|>", "<|im_start", "<|im_end|>x",
    "a<|endoftext|>b", "<|reserved_3|> <|reserved_17|>", "<|startoftext|>text", "<|tool_call_start|>[f(x=1)]<|tool_call_end|>",
    " <|im_end|> ", "<|fim_pre|>def<|fim_suf|>return<|fim_mid|>", "<|im_end|<|im_end|>", "<<|pad|>>",
]
LONG = [
    "a" * 5000, "ab" * 3000, "1" * 1000, " " * 1000, "\n" * 500, "Supercalifragilisticexpialidocious" * 40,
    "日" * 2000, "😀" * 300, "-" * 700 + "=" * 700, "a b " * 800,
]


def local_texts(limit_files=40, seed=7):
    """Slices of local files: Python sources, licenses, man pages in several languages."""
    rng = random.Random(seed)
    paths = sorted(glob.glob("/usr/lib/python3*/*.py"))[400:]
    paths += sorted(glob.glob("/usr/share/man/*/man1/*.gz"))
    paths += sorted(glob.glob("/usr/share/common-licenses/*"))
    rng.shuffle(paths)
    texts = []
    for path in paths[:limit_files]:
        opener = gzip.open if path.endswith(".gz") else open
        try:
            with opener(path, "rb") as handle:
                data = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        start = rng.randrange(max(1, len(data) - 3000))
        texts.append(data[start:start + rng.randrange(200, 3000)])
    return texts


def random_unicode(count=60, seed=11):
    """Seeded random strings mixing ASCII, Latin, CJK, Arabic, Devanagari, emoji, marks and whitespace."""
    rng = random.Random(seed)
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x400, 0x4FF), (0x600, 0x6FF), (0x900, 0x97F),
              (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F), (0x2000, 0x206F),
              (0xFF00, 0xFFEF), (0x9, 0xD), (0x1D400, 0x1D4FF)]
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randrange(1, 120)):
            low, high = rng.choice(blocks)
            chars.append(chr(rng.randint(low, high)))
        texts.append("".join(chars))
    return texts


def invalid_utf8(count=25, seed=13):
    """Byte strings with invalid UTF-8: stray continuation bytes, truncated sequences, overlongs, surrogates."""
    rng = random.Random(seed)
    fixed = [b"\xff", b"\x80abc", b"abc\xe6\x97", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"\xf4\x90\x80\x80",
             b"ok \xe2\x82 partial \xf0\x9f\x98", b"\xe6\x97\xa5\xe6\x9c", "日本".encode() + b"\xfe" + "語".encode()]
    texts = list(fixed)
    for _ in range(count):
        texts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60))))
    return texts


def all_texts():
    """Every test text as bytes."""
    strings = CODE + SCRIPTS + EMOJI + COMBINING + WHITESPACE + DIGITS + APOSTROPHES + SPECIAL + LONG
    strings += local_texts() + random_unicode()
    mixed = [" ".join(strings[index:index + 5]) for index in range(0, 60, 5)]
    return [text.encode("utf-8") for text in strings + mixed] + invalid_utf8()
