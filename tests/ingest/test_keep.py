"""keep.py: the Note Quality Gate and the user's keep (inbox/ -> engrams/, tier engram)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fakes import EVERY_CANDIDATE, note_value
from tests.support.paths import REPO
from vault_pipeline.errors import LockError
from vault_pipeline.ingest.keep import EngramIndex, keep, keep_scores, quality_problems, sentence_count
from vault_pipeline.ingest.notes import atomic_id
from vault_pipeline.ingest.select import Selector
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.note import Note, safe_stem

TODAY = date(2024, 5, 1)


def atomic(sentence: str, category: str = "decision", conv: str = "c-1", **extra) -> Note:
    """An inbox note as ingest writes it: id and stem from the sentence, no creation date."""
    nid = atomic_id("chatgpt", conv, category, sentence)
    return note_value(
        nid,
        f"{sentence}\n\nSource: [[session-abcdef#^m-m1]]\n",
        stem=safe_stem(sentence, nid),
        category=category,
        created=None,
        source=None,
        session="[[session-abcdef]]",
        source_kind="chatgpt",
        source_conversation=conv,
        source_title="t",
        source_messages=["m1"],
        **extra,
    )


@pytest.fixture
def vault(make_vault) -> Vault:
    return make_vault()


def add(vault: Vault, *notes: Note) -> list[Note]:
    for note in notes:
        assert vault.write(note).outcome == "created"
    return list(notes)


# --------------------------------------------------------------------------- the gate


GOOD = {"category": "fact", "source": {"messages": ["m1"]}}


@pytest.mark.parametrize(
    "sentence, fragment",
    [
        ("We chose Postgres. It is fast.", "more than one sentence"),
        ("Should we choose Postgres?", "not a declarative sentence"),
        ("Postgres is great!", "not a declarative sentence"),
        (
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen.",
            "16 words",
        ),
    ],
)
def test_gate_sentence_rules(sentence, fragment):
    problems = quality_problems(GOOD, sentence + "\n", set())
    assert any(fragment in p for p in problems), problems


def test_gate_passes_a_good_note_and_knows_abbreviations():
    assert quality_problems(GOOD, "We keep the notes in Postgres, e.g. for search.\n\nSource: x\n", set()) == []
    assert sentence_count("Dr. Smith met J. Doe at 3 p.m. today.") == 1
    assert quality_problems({**GOOD, "category": "open-question"}, "Which index type fits best?\n", set()) == []


def test_gate_category_source_and_empty_body():
    problems = quality_problems({"category": "musing"}, "\n", set())
    assert any("category" in p for p in problems)
    assert any("no source" in p for p in problems)
    assert any("no sentence" in p for p in problems)
    assert (
        quality_problems({"category": "fact", "source_conversation": "c-1"}, "The server runs Debian.\n", set()) == []
    )


def test_gate_detects_engram_duplicates():
    engrams = {"We will use Postgres for storage.", "The annual budget is ten thousand euros this year."}
    assert any("duplicates" in p for p in quality_problems(GOOD, "we will use postgres for storage\n", engrams))
    near = "The annual budget is ten thousand euros this year, firmly."  # Jaccard 9/10
    assert any("duplicates" in p for p in quality_problems(GOOD, near + "\n", engrams))
    assert quality_problems(GOOD, "We will use SQLite for caching.\n", engrams) == []


words = st.lists(st.sampled_from("a b c d e f g h i j k l m n o p".split()), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(words, max_size=30), words)
def test_engram_index_matches_brute_force(corpus, query):
    index = EngramIndex(" ".join(w) for w in corpus)
    q = set(query)
    brute = any(len(q & set(w)) / len(q | set(w)) >= 0.9 for w in corpus)
    assert (index.duplicate_of(" ".join(query)) is not None) == brute


# --------------------------------------------------------------------------- keeping


def test_keep_a_named_note(vault):
    note, other = add(vault, atomic("We will use Postgres for storage."), atomic("We ship on Fridays."))
    before = (vault.root / note.relpath).read_text()
    report = keep(vault, selector=EVERY_CANDIDATE, targets=[note.stem], today=TODAY)
    assert report.kept == [f"engrams/{note.stem}.md"] and not report.refused
    assert not (vault.root / note.relpath).exists()
    frontmatter, _, _ = vault.read(report.kept[0])
    assert (frontmatter["status"], frontmatter["tier"], frontmatter["kept"]) == ("kept", "engram", "2024-05-01")
    after = (vault.root / report.kept[0]).read_text()
    assert after == before.replace("status: provisional", "status: kept").replace("tier: chat", "tier: engram").replace(
        'session: "[[session-abcdef]]"\n', 'session: "[[session-abcdef]]"\nquality: passes\nkept: 2024-05-01\n'
    )
    assert (vault.root / other.relpath).exists()
    # Re-ingesting the same note does not bring it back into the inbox.
    assert vault.write(note).outcome == "moved-elsewhere"
    assert not (vault.root / note.relpath).exists()


def test_targets_by_id_path_and_unknown(vault):
    a, b = add(
        vault,
        atomic("We chose PostgreSQL over MySQL for the billing service."),
        atomic("The deploy uses Cloud Run in europe-west4."),
    )
    report = keep(vault, selector=EVERY_CANDIDATE, targets=[a.id, b.relpath, "nope"], today=TODAY)
    assert report.kept == sorted([f"engrams/{a.stem}.md", f"engrams/{b.stem}.md"])
    assert report.skipped == [("nope", "no such note in inbox/")]
    again = keep(vault, selector=EVERY_CANDIDATE, targets=[a.stem], today=TODAY)
    assert again.skipped == [(a.stem, f"already kept: engrams/{a.stem}.md")]


def test_keep_all_passing(vault):
    good, long_one = add(
        vault,
        atomic("Postgres is the store of the notes."),
        atomic("This sentence is far too long to pass the gate because it keeps going on and on."),
    )
    report = keep(vault, selector=EVERY_CANDIDATE, all_passing=True, today=TODAY)
    assert report.kept == [f"engrams/{good.stem}.md"]
    assert [p for p, _ in report.refused] == [long_one.relpath]
    assert (vault.root / long_one.relpath).exists()


def test_a_user_flipped_note_is_kept_even_when_it_fails(vault):
    (note,) = add(vault, atomic("A flipped note that is much too long to ever pass the quality gate at all."))
    path = vault.root / note.relpath
    path.write_text(path.read_text().replace("status: provisional", "status: kept") + "\nMy own thought.\n")
    report = keep(vault, selector=EVERY_CANDIDATE, today=TODAY)
    assert report.kept == [f"engrams/{note.stem}.md"]
    assert report.flagged and "words" in report.flagged[0][1][0]
    text = (vault.root / report.kept[0]).read_text()
    assert text.endswith("\nMy own thought.\n") and "tier: engram" in text
    assert vault.write(note).outcome == "moved-elsewhere"


def test_a_failing_named_note_is_refused_unless_forced(vault):
    (note,) = add(vault, atomic("Is this a question?"))
    before = (vault.root / note.relpath).read_bytes()
    report = keep(vault, selector=EVERY_CANDIDATE, targets=[note.stem], today=TODAY)
    assert report.kept == [] and report.refused[0][0] == note.relpath
    assert "not a declarative sentence" in report.refused[0][1]
    # Only the verdict is added, as one frontmatter key; every other byte stays.
    after = (vault.root / note.relpath).read_text()
    assert "quality: fails — not a declarative sentence" in after
    assert "\n".join(line for line in after.splitlines() if not line.startswith("quality:")) + "\n" == before.decode()
    forced = keep(vault, selector=EVERY_CANDIDATE, targets=[note.stem], force=True, today=TODAY)
    assert forced.kept == [f"engrams/{note.stem}.md"]


def test_engram_duplicates_are_refused_also_within_one_run(vault):
    (first,) = add(vault, atomic("We will use Postgres for storage."))
    keep(vault, selector=EVERY_CANDIDATE, targets=[first.stem], today=TODAY)
    (dup,) = add(vault, atomic("We will use Postgres for storage!", conv="c-2"))
    report = keep(vault, selector=EVERY_CANDIDATE, targets=[dup.stem], today=TODAY)
    assert any("duplicates an existing engram" in p for p in report.refused[0][1])
    add(vault, atomic("Cats are asleep a lot.", conv="c-3"), atomic("Cats are asleep a lot.", conv="c-4"))
    both = keep(vault, selector=EVERY_CANDIDATE, all_passing=True, today=TODAY)
    assert len(both.kept) == 1


def test_keep_holds_the_vault_lock(vault):
    add(vault, atomic("Locked notes can wait."))
    holder = (
        "import sys, time\nfrom vault_pipeline.vault.files import Vault\n"
        "with Vault.open(sys.argv[1]).lock('ingest'):\n    print('held', flush=True)\n    time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(vault.root)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockError, match="ingest"):
            keep(vault, selector=EVERY_CANDIDATE, all_passing=True, today=TODAY)
    finally:
        proc.kill()
        proc.wait()
    assert len(keep(vault, selector=EVERY_CANDIDATE, all_passing=True, today=TODAY).kept) == 1


def test_keep_is_deterministic(make_vault):
    results = []
    for run in range(2):
        vault = make_vault(f"v{run}")
        add(vault, *(atomic(f"Fact number {i} holds.") for i in (3, 1, 2)))
        results.append(keep(vault, selector=EVERY_CANDIDATE, all_passing=True, today=TODAY).kept)
    assert results[0] == results[1] == sorted(results[0])


def test_an_existing_engram_file_blocks_the_keep_before_any_edit(vault):
    (note,) = add(vault, atomic("The names are kept apart."))
    (vault.root / "engrams" / f"{note.stem}.md").write_text("the user's own file\n")
    before = (vault.root / note.relpath).read_bytes()
    report = keep(vault, selector=EVERY_CANDIDATE, targets=[note.id], today=TODAY)
    assert report.kept == [] and "already exists" in report.refused[0][1][0]
    assert (vault.root / note.relpath).read_bytes() == before
    assert (vault.root / "engrams" / f"{note.stem}.md").read_text() == "the user's own file\n"


# --------------------------------------------------------------------------- the gate on labels, verdicts, progress, JSON


@pytest.mark.parametrize(
    "sentence, reason",
    [
        ("In the form of user stories.", "quality score"),
        ("This is a simplified example.", "quality score"),
        ("C. To find the number of clusters.", "quiz option"),
        ("Recurring terms here are django, docker and postgres.", "template filler"),
        ("The Mahalanobis distance is.", "quality score"),
        ("Het doel van unsupervised learning is om patronen.", "quality score"),
        ("Certainly! nnUNet is a framework for medical image segmentation.", "more than one sentence"),
    ],
)
def test_the_gate_names_why_it_refuses(sentence, reason):
    """The hard rules name their rule; below the shipped selector's keep bar, the score and its signs."""
    body = sentence + "\n"
    scored = keep_scores([("n", {**GOOD, "speaker": "assistant"}, body, None)])["n"]
    problems = quality_problems(GOOD, body, set(), scored=scored)
    assert any(reason in p for p in problems), problems


@pytest.mark.parametrize(
    "sentence",
    [
        "Share your expertise in Python by creating an online course.",  # imperative the lexicon tags a noun
        "Cloud Run: Deploy your Django application as a container using Docker.",  # field label tolerated
        "Volg de instructies van de installatie op de website.",  # Dutch imperative
        "The pool keeps at most twenty connections open.",
        "I graduated from the conservatory last week.",  # past tense after a pronoun, tagged a participle
        "Type `pytest` to run your test.",  # a code span stands as a noun phrase; "type" is a verb by "typed"
        "The `GKE_ZONE` usually refers to the geographical zone.",  # a determined span is a subject's noun
        "The server's response time is short.",  # a possessive inside the subject
        "For translations with variables, use the `{% blocktrans %}` tag.",  # an imperative after a fronted phrase
        "In the new app directory, create a `templatetags` directory.",
        "The `delete()` method deletes all objects in the QuerySet.",  # an -s verb the lexicon calls a plural
        "It's still a good idea to set up load balancing.",  # the contraction's verb ("It ' s" to the tagger)
        "Always be sure to explore the transformed variables.",  # an adverb before the imperative
        "Maak connecties met professionals in je interessegebieden.",  # Dutch: maak -> maken (simplemma)
        "Gallup voert wereldwijde onderzoeken uit naar welzijn.",  # Dutch finite verb outside the closed list
    ],
)
def test_gate_finds_the_verb_of_imperatives_and_labelled_lines(sentence):
    assert "fragment, no verb" not in quality_problems(GOOD, sentence + "\n", set())


def test_a_dutch_separable_particle_ends_a_sentence_and_a_preposition_does_not():
    from vault_pipeline.ingest.quality import features

    # "Pas ... aan" (aanpassen), "berg ... op" (opbergen): the particle closes the clause.
    for sentence in (
        "Neem dan een stapje terug en pas de intensiteit of oefeningen aan.",
        "Verwijder overbodige spullen en berg deze netjes op.",
        "Moedig regelmatige lichaamsbeweging aan.",
    ):
        assert not features(sentence)["dangling_end"], sentence
    # No verb of the sentence takes it: the phrase is open.
    for sentence in ("De bezoeker kan terugkomen bij.", "Het verschil zit in.", "Dit is de methode van."):
        assert features(sentence)["dangling_end"], sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "Appel en een handvol noten.",
        "Statiegebruik en andere conventies zoals templates en settings.",
        "Test coverage report.",
        # A code span after a determiner is part of the noun phrase, not a subject pronoun ("the it flag").
        "Without the `-d` flag.",
        "An `expiration_date` field (defaulting to 7 days from creation).",
        # A possessive "'s" is no pronoun: the tagger's split "s" made the next noun its verb.
        "The user's session data.",
    ],
)
def test_gate_still_finds_no_verb_in_noun_phrases(sentence):
    from vault_pipeline.ingest.quality import features

    assert features(sentence)["no_verb"]


def test_chit_chat_names_no_thing():
    from vault_pipeline.ingest.quality import features

    assert features("That's great, Maria.")["no_noun"]
    assert features("It's so rewarding.")["no_noun"]
    assert not features("I'm all about dramas and romcoms.")["no_noun"]
    assert not features("Use `ENV` in the image.")["no_noun"]
    assert not features("The meeting moved to 3 May.")["no_noun"]


@pytest.mark.parametrize(
    "sentence, reason",
    [
        ("Recurring terms here are django, docker and postgres.", "template filler"),
        ("C. To find the number of clusters.", "quiz option"),
        ("D: Testing assumptions does not allow researchers to skip the analysis.", "quiz option"),
        ("Traceback: the worker crashed on start.", "log line"),
        ("ERROR: connection refused by the host.", "log line"),
    ],
)
def test_named_exclusions_fail_even_a_gate_that_passes_everything(sentence, reason):
    from vault_pipeline.ingest.quality import hard_problems

    assert hard_problems(sentence, "fact") == [reason]
    assert hard_problems("3 May is the submission deadline.", "fact") == []
    assert hard_problems('In the plan phase I get an error: no function named "env".', "fact") == []
    passes_all = keep_scores([("n", GOOD, sentence + "\n", None)], EVERY_CANDIDATE)["n"]
    assert quality_problems(GOOD, sentence + "\n", set(), scored=passes_all, keep_at=0.0) == [reason]


def test_a_gerund_subject_is_a_subject_a_gerund_alone_is_not():
    from vault_pipeline.ingest.quality import features

    assert not features("Posting dance clips online can help a new studio.")["verb_first"]
    assert features("Posting dance clips online every week.")["verb_first"]
    # A leading adverb stands for no subject: the finite verb still comes first.
    assert features("Typically occurs when the respondent skips a question.")["verb_first"]
    assert not features("Typically the respondent skips a question.")["verb_first"]


def test_gate_features_for_clauses_without_a_main_clause_and_talk_about_the_chat():
    from vault_pipeline.ingest.quality import features

    assert features("Expected problems that may need to be addressed.")["relative_only"]
    assert not features("The problems that we expected were addressed in May.")["relative_only"]
    assert features("I will create a set of five questions.")["about_the_chat"]
    assert features("The PHP function you provided defines the routes.")["about_the_chat"]
    assert not features("Postgres stores the notes of the vault.")["about_the_chat"]


def test_a_pronoun_points_outside_the_note_only_without_an_antecedent_in_it():
    from vault_pipeline.ingest.quality import features

    assert not features("If you don't have Cookiecutter installed, you can install it using pip.")["pronoun"]
    assert not features("Non-representative outliers can distort results and make them less general.")["pronoun"]
    assert features("You can install it using pip.")["pronoun"]  # nothing before "it" to point at
    assert features("Apply these files to your Kubernetes cluster.")["pronoun"]  # a demonstrative points out
    assert features("Use it to deploy the app.")["pronoun"]  # the first word is a verb, no antecedent
    assert features("Then I install it with pip.")["pronoun"]  # "I" is no name
    assert not features("Zet de oven aan en laat hem warm worden.")["pronoun"]  # "hem" is no pointer here
    assert features("Je kunt ook zo je slingers opbergen in deze doos.")["pronoun"]  # Dutch demonstrative


def test_a_dutch_note_opening_on_daar_or_hier_points_before_it():
    from vault_pipeline.ingest.quality import features

    # "Daar ... mee" is "with that", "Hier" is "in this": the note does not say what.
    assert features("Daar ben ik het niet mee eens.")["unresolved_reference"]
    assert features("Hier kun je PySpark-code schrijven in notebooks.")["unresolved_reference"]
    # A connective built on it ("Daarnaast", "Daarom") is another word: other signs judge it.
    assert not features("Daarnaast zijn er nog andere populaire tools en bibliotheken.")["unresolved_reference"]


def test_a_note_cut_from_a_longer_sentence_and_one_after_a_connective():
    from vault_pipeline.ingest.quality import features

    source = "To deploy the app, you can use environment variables.\nYes, you can read secrets in Terraform."
    assert features("You can use environment variables.", source)["cut_start"]  # its condition is lost
    assert not features("You can read secrets in Terraform.", source)["cut_start"]  # only "Yes," before it
    assert features("The pool keeps connections", "The pool keeps connections open for reuse.")["cut_end"]
    assert not features("The pool keeps connections.", "The pool keeps connections, which saves time.")["cut_end"]


def test_gate_checks_literal_tokens_against_the_source():
    body = "The pool has a MAX_CONN of 100.\n"
    problems = quality_problems(GOOD, body, set(), source="The pool has a MAX_POOL of 100.")
    assert "not in its source: MAX_CONN" in problems
    assert not any("source:" in p for p in quality_problems(GOOD, body, set(), source="set MAX_CONN to 100"))


def test_gate_names_an_identifier_that_lost_its_separators():
    source = "Back up with `pg_dump` and restore with `pg_restore`; _Note_: see Node.js."
    body = "PostgreSQL uses pgdump and pgrestore.\n"
    problems = quality_problems(GOOD, body, set(), source=source)
    assert "not in its source: pgdump (pg_dump), pgrestore (pg_restore)" in problems
    # Emphasis underscores are no separators, and a word the source uses as written is no mangling.
    for fine in ("Note the backup first.\n", "PostgreSQL restores with `pg_restore`.\n", "Node.js runs it.\n"):
        assert not any("source:" in p for p in quality_problems(GOOD, fine, set(), source=source))
    assert any("NodeJS (Node.js)" in p for p in quality_problems(GOOD, "NodeJS runs it.\n", set(), source=source))


NO_VERB_REFUSED = Selector({"sign:no_verb": -5.0}, 0.0, write=0.0, keep=0.5)  # P 0.5 unless it has no verb


def test_all_passing_writes_verdicts_dry_run_writes_nothing_and_progress_is_reported(vault):
    good, bad = add(vault, atomic("Postgres is the store of the notes."), atomic("In the form of user stories."))
    before = (vault.root / bad.relpath).read_bytes()
    calls = []
    dry = keep(
        vault,
        all_passing=True,
        dry_run=True,
        today=TODAY,
        progress=lambda d, t, label: calls.append((d, t)),
        selector=NO_VERB_REFUSED,
    )
    assert dry.kept == [f"engrams/{good.stem}.md"] and (vault.root / good.relpath).exists()
    assert (vault.root / bad.relpath).read_bytes() == before
    assert calls[0] == (0, 2) and calls[-1] == (2, 2)
    report = keep(vault, all_passing=True, today=TODAY, selector=NO_VERB_REFUSED)
    assert report.kept == [f"engrams/{good.stem}.md"]
    assert report.refused[0][0] == bad.relpath and "fragment, no verb" in report.refused[0][1][0]
    frontmatter, _, _ = vault.read(bad.relpath)
    assert frontmatter["quality"].startswith("fails — quality score 0.01 below 0.50: fragment, no verb")
    assert frontmatter["status"] == "provisional"


def test_cli_keep_json_shape(vault):
    add(vault, atomic("Postgres is the store of the notes."), atomic("In the form of user stories."))
    proc = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", "keep", "--all-passing", "--json", "--vault", str(vault.root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= {"kept", "refused", "skipped"} and len(data["kept"]) + len(data["refused"]) == 2
    refused = {r["path"]: r["reasons"] for r in data["refused"]}
    assert all(path.startswith("inbox/") and reasons for path, reasons in refused.items())
    assert any("quality score" in reason for reasons in refused.values() for reason in reasons)


def test_a_re_ingest_keeps_the_gate_verdict_and_writes_nothing(tmp_path):
    """`quality` is a lifecycle key: re-ingesting the same export leaves the verdicts keep wrote."""
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.pipeline import ingest

    export = tmp_path / "chat.md"
    export.write_text(
        "# Stores\n\nUser: Which database do we use?\n\n"
        "Assistant: We use Postgres for the main store. With the pgvector extension of Postgres.\n",
        encoding="utf-8",
    )
    vault = Vault.init(tmp_path / "v")
    llm = build_llm("offline")
    ingest(vault, [export], llm, selector=EVERY_CANDIDATE)
    report = keep(vault, all_passing=True, selector=NO_VERB_REFUSED)
    verdicts = {p.name: p.read_text(encoding="utf-8") for p in (vault.root / "inbox").glob("*.md")}
    assert report.refused and all("quality: " in text for text in verdicts.values())
    again = ingest(vault, [export], llm, selector=EVERY_CANDIDATE)
    assert again.files_written == 0
    assert {p.name: p.read_text(encoding="utf-8") for p in (vault.root / "inbox").glob("*.md")} == verdicts
