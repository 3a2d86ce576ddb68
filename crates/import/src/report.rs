//! What happened to each directive: translated, approximated, refused or irrelevant, with
//! its `FILE:LINE` and why; and the counts the report ends with.

use ringx_nginxconf::Directive;

/// The fate of one directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Carried over with the same meaning.
    Translated,
    /// Carried over, but ringx behaves differently in a way the reason says.
    Approximated,
    /// Not carried over: ringx has no equivalent (or the value cannot be expressed).
    Refused,
    /// Not carried over because it does not matter to ringx (a buffer size, a module load).
    Irrelevant,
}

impl Fate {
    pub fn word(self) -> &'static str {
        match self {
            Fate::Translated => "translated",
            Fate::Approximated => "approximated",
            Fate::Refused => "refused",
            Fate::Irrelevant => "irrelevant",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Note {
    pub place: String,
    pub directive: String,
    pub fate: Fate,
    pub reason: String,
}

/// Every directive's fate.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub notes: Vec<Note>,
}

impl Report {
    /// Notes a directive's fate; a directive already noted keeps its first note (an inherited
    /// directive is met again in every location that inherits it).
    pub fn note(&mut self, d: &Directive, fate: Fate, reason: impl Into<String>) {
        let place = d.place();
        if self.is_noted(&place, &d.name) {
            return;
        }
        self.notes.push(Note {
            place,
            directive: d.name.clone(),
            fate,
            reason: reason.into(),
        });
    }

    pub fn is_noted(&self, place: &str, name: &str) -> bool {
        self.notes
            .iter()
            .any(|n| n.place == place && n.directive == name)
    }

    pub fn ok(&mut self, d: &Directive) {
        self.note(d, Fate::Translated, "");
    }

    pub fn approx(&mut self, d: &Directive, reason: impl Into<String>) {
        self.note(d, Fate::Approximated, reason);
    }

    pub fn refuse(&mut self, d: &Directive, reason: impl Into<String>) {
        self.note(d, Fate::Refused, reason);
    }

    pub fn irrelevant(&mut self, d: &Directive, reason: impl Into<String>) {
        self.note(d, Fate::Irrelevant, reason);
    }

    pub fn count(&self, fate: Fate) -> usize {
        self.notes.iter().filter(|n| n.fate == fate).count()
    }

    /// Whether anything was not translated as it stands (what `--strict` refuses).
    pub fn has_loss(&self) -> bool {
        self.notes.iter().any(|n| n.fate != Fate::Translated)
    }

    /// The report as printed: one line per directive not simply translated, then the counts.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for n in self.notes.iter().filter(|n| n.fate != Fate::Translated) {
            out.push_str(&format!(
                "{}: {} {}: {}\n",
                n.place,
                n.fate.word(),
                n.directive,
                n.reason
            ));
        }
        out.push_str(&format!(
            "translated {}, approximated {}, refused {}, irrelevant {}\n",
            self.count(Fate::Translated),
            self.count(Fate::Approximated),
            self.count(Fate::Refused),
            self.count(Fate::Irrelevant)
        ));
        out
    }
}
