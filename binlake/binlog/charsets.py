"""Collation ids (as written in binlogs) to character sets, and character sets to Python codecs.

Ids 0-247 are shared by MySQL and MariaDB; 248-323 are MySQL 8 (gb18030, utf8mb4_0900 family); 576 and up are
MariaDB's. The table was read from MariaDB 10.11's information_schema.COLLATIONS plus MySQL 8's documented ids.
"""

from __future__ import annotations

import contextlib

# charset -> collation ids; an int is one id, a pair is an inclusive range.
_COLLATION_IDS: dict[str, list[int | tuple[int, int]]] = {
    "armscii8": [32, 64, 1056, 1088],
    "ascii": [11, 65, 1035, 1089],
    "big5": [1, 84, 1025, 1108],
    "binary": [63],
    "cp1250": [26, 34, 44, 66, 99, 1050, 1090],
    "cp1251": [14, 23, (50, 52), (1074, 1075)],
    "cp1256": [57, 67, 1081, 1091],
    "cp1257": [29, (58, 59), (1082, 1083)],
    "cp850": [4, 80, 1028, 1104],
    "cp852": [40, 81, 1064, 1105],
    "cp866": [36, 68, 1060, 1092],
    "cp932": [(95, 96), (1119, 1120)],
    "dec8": [3, 69, 1027, 1093],
    "eucjpms": [(97, 98), (1121, 1122)],
    "euckr": [19, 85, 1043, 1109],
    "gb18030": [(248, 250)],
    "gb2312": [24, 86, 1048, 1110],
    "gbk": [28, 87, 1052, 1111],
    "geostd8": [(92, 93), (1116, 1117)],
    "greek": [25, 70, 1049, 1094],
    "hebrew": [16, 71, 1040, 1095],
    "hp8": [6, 72, 1030, 1096],
    "keybcs2": [37, 73, 1061, 1097],
    "koi8r": [7, 74, 1031, 1098],
    "koi8u": [22, 75, 1046, 1099],
    "latin1": [5, 8, 15, 31, (47, 49), 94, 1032, 1071],
    "latin2": [2, 9, 21, 27, 77, 1033, 1101],
    "latin5": [30, 78, 1054, 1102],
    "latin7": [20, (41, 42), 79, 1065, 1103],
    "macce": [38, 43, 1062, 1067],
    "macroman": [39, 53, 1063, 1077],
    "sjis": [13, 88, 1037, 1112],
    "swe7": [10, 82, 1034, 1106],
    "tis620": [18, 89, 1042, 1113],
    "ucs2": [35, 90, (128, 151), 159, (640, 642), 1059, 1114, 1152, 1174],
    "ujis": [12, 91, 1036, 1115],
    "utf16": [(54, 55), (101, 124), (672, 674), (1078, 1079), 1125, 1147],
    "utf16le": [56, 62, 1080, 1086],
    "utf32": [(60, 61), (160, 183), (736, 738), (1084, 1085), 1184, 1206],
    "utf8mb3": [33, 76, 83, (192, 215), 223, (576, 578), 1057, 1107, 1216, 1238],
    "utf8mb4": [(45, 46), (224, 247), (255, 323), (608, 610), (1069, 1070), 1248, 1270],
}

COLLATION_CHARSET: dict[int, str] = {}
for _charset, _ids in _COLLATION_IDS.items():
    for _item in _ids:
        _lo, _hi = _item if isinstance(_item, tuple) else (_item, _item)
        for _id in range(_lo, _hi + 1):
            COLLATION_CHARSET[_id] = _charset

# MySQL charset name -> Python codec. MySQL's latin1 is Windows-1252; its ascii accepts 8-bit bytes.
CHARSET_CODEC: dict[str, str] = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "mysql-latin1",
    "latin2": "iso8859-2",
    "latin5": "iso8859-9",
    "latin7": "iso8859-13",
    "ascii": "latin-1",
    "binary": "latin-1",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "gb18030": "gb18030",
    "big5": "big5",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "greek": "iso8859-7",
    "hebrew": "iso8859-8",
    "tis620": "tis_620",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "dec8": "latin-1",
    "hp8": "latin-1",
    "swe7": "latin-1",
    "keybcs2": "latin-1",
    "armscii8": "latin-1",
    "geostd8": "latin-1",
}

BINARY = 63

# MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined mapped to the C1 controls, so every
# byte decodes. Decoding goes through latin-1 (total) and a translation of 0x80-0x9F.
_CP1252_HIGH = {}
for _b in range(0x80, 0xA0):
    with contextlib.suppress(UnicodeDecodeError):
        _CP1252_HIGH[_b] = bytes([_b]).decode("cp1252")
_LATIN1_TRANSLATE = str.maketrans({chr(b): c for b, c in _CP1252_HIGH.items()})
_LATIN1_ENCODE = {c: b for b, c in _CP1252_HIGH.items()}


def decode_mysql_latin1(raw: bytes) -> str:
    return raw.decode("latin-1").translate(_LATIN1_TRANSLATE)


def encode_mysql_latin1(text: str) -> bytes:
    return bytes(_LATIN1_ENCODE.get(ch) or ord(ch) for ch in text) if text else b""


def decoder_for(collation: int | None):
    """A function bytes -> str for a collation id, or None when the id is unknown."""
    codec = codec_of(collation)
    if codec is None:
        return None
    if codec == "mysql-latin1":
        return decode_mysql_latin1
    return lambda raw, _c=codec: raw.decode(_c)


_codec_cache: dict[int | None, str | None] = {}


def charset_of(collation: int | None) -> str | None:
    if collation is None:
        return None
    return COLLATION_CHARSET.get(collation)


def codec_of(collation: int | None) -> str | None:
    """Python codec for a collation id; None when the id is unknown (the caller decides a fallback)."""
    try:
        return _codec_cache[collation]
    except KeyError:
        cs = charset_of(collation)
        codec = CHARSET_CODEC.get(cs) if cs else None
        _codec_cache[collation] = codec
        return codec


def decode_text(raw: bytes, collation: int | None) -> str:
    """Decode statement or string bytes; unknown charsets are read as UTF-8, then Windows-1252 if not UTF-8."""
    dec = decoder_for(collation)
    if dec is not None:
        with contextlib.suppress(UnicodeDecodeError):
            return dec(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")
