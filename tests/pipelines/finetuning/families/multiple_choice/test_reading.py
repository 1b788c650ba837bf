"""Multiple-choice inputs: SWAG's csv, RACE's json files and labels as indices or letters, every
question used or counted under its reason."""

import json

from pipelines.config import FinetuneSection
from pipelines.finetuning.families.multiple_choice.reading import choice_index, read_questions

SWAG = """video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label
v1,0,x,Members of the crowd cheer.,The players,gold,run onto the field.,eat soup.,fly away.,sleep.,0
v2,1,x,A woman opens a jar.,She,gold,pours the sauce.,sings loudly.,,drives off.,0
v3,2,x,The chef slices bread.,He,gold,butters it.,paints it.,throws it.,mails it.,
v4,3,x,A dog sees a ball.,The dog,gold,naps.,runs after it.,reads.,cooks.,1
"""


def test_a_label_is_an_index_or_a_letter():
    assert [choice_index(x, 4) for x in (2, "B", "3", 1.0, " d ")] == [2, 1, 3, 1, 3]
    assert [choice_index(x, 4) for x in (4, "E", -1, True, "x", None)] == [None] * 6


def test_swag_csv_rows_are_questions_and_bad_rows_are_counted(tmp_path):
    (tmp_path / "train.csv").write_text(SWAG)
    read = read_questions(str(tmp_path / "train.csv"), FinetuneSection(task="multiple_choice"))
    assert read.contexts == ["Members of the crowd cheer.", "A dog sees a ball."]
    assert read.questions == ["The players", "The dog"] and read.labels == [0, 1]
    assert read.choices[1] == ["naps.", "runs after it.", "reads.", "cooks."]
    assert read.read == 4 and read.rejected == {"empty_choice": 1, "missing_label": 1}
    assert read.rejection_examples[0] == f"{tmp_path}/train.csv row 1: empty_choice"


def test_race_json_files_with_letter_answers_and_a_question_of_another_choice_count(tmp_path):
    folder = tmp_path / "race"  # RACE's layout: train/high/*.txt and train/middle/*.txt, JSON inside
    (folder / "middle").mkdir(parents=True)
    article = {"article": "Tom has a red kite. He flies it on Sundays.", "id": "high1.txt"}
    (folder / "1.txt").write_text(
        json.dumps(
            {
                **article,
                "questions": ["What colour is the kite?", "When does Tom fly it?", "Who?"],
                "options": [
                    ["Red", "Blue", "Green", "Black"],
                    ["Sundays", "Mondays", "Never", "Daily"],
                    ["Tom", "Ann"],
                ],
                "answers": ["A", "A", "A"],
            }
        )
    )
    (folder / "middle" / "2.txt").write_text(
        json.dumps({**article, "questions": ["Q?"], "options": [["a", "b", "c", "d"]], "answers": ["Z"]})
    )
    read = read_questions(str(folder), FinetuneSection(task="multiple_choice"))
    assert read.questions == ["What colour is the kite?", "When does Tom fly it?"] and read.labels == [0, 0]
    assert read.ids == ["high1.txt-0", "high1.txt-1"]  # RACE's {id}-{index}
    assert read.contexts[0] == article["article"]
    assert read.read == 4 and read.rejected == {"choice_count": 1, "label_not_a_choice": 1}
    assert any("question 2 (2 choices, not 4): choice_count" in e for e in read.rejection_examples)
