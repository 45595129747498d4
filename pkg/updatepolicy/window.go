package updatepolicy

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // the zone database, for an image without zone files (loadLocation)
)

// Window is a weekly maintenance window: on Days, from Start to End (minutes after midnight) in
// Location. End <= Start means the window runs past midnight into the next day (the day named is
// the day it starts).
type Window struct {
	Days     [7]bool // indexed by time.Weekday
	Start    int
	End      int
	Location *time.Location
	text     string
}

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

const windowHelp = `write it as "<days> <HH:MM>-<HH:MM> <time zone>", e.g. "Sat 02:00-04:00 UTC", "Mon-Fri 22:00-23:30 Europe/Berlin" or "daily 03:00-04:00 UTC"`

// MaxWindowLength bounds an update window's text (the longest IANA zone name and every day
// listed fit in half of it).
const MaxWindowLength = 128

// ParseWindow reads a nogoo9/update-window value strictly: days (a day, a comma list, a range
// like Mon-Fri, or "daily"), a 24-hour time range, and a time zone ("UTC" or an IANA name).
// Anything else is an error that says what is wrong and how to write it.
func ParseWindow(s string) (Window, error) {
	if len(s) > MaxWindowLength {
		return Window{}, fmt.Errorf("update window %s is longer than %d bytes: %s", quote(s), MaxWindowLength, windowHelp)
	}
	fields := strings.Fields(s)
	if len(fields) != 3 {
		return Window{}, fmt.Errorf("update window %q has %d parts, want 3: %s", s, len(fields), windowHelp)
	}
	w := Window{text: strings.Join(fields, " ")}
	if err := w.parseDays(fields[0]); err != nil {
		return Window{}, fmt.Errorf("update window %q: %w: %s", s, err, windowHelp)
	}
	start, end, ok := strings.Cut(fields[1], "-")
	if !ok {
		return Window{}, fmt.Errorf("update window %q: time range %q has no '-': %s", s, fields[1], windowHelp)
	}
	var err error
	if w.Start, err = clock(start); err != nil {
		return Window{}, fmt.Errorf("update window %q: start %w: %s", s, err, windowHelp)
	}
	if w.End, err = clock(end); err != nil {
		return Window{}, fmt.Errorf("update window %q: end %w: %s", s, err, windowHelp)
	}
	if w.Start == w.End {
		return Window{}, fmt.Errorf("update window %q starts and ends at the same time, so it is empty: %s", s, windowHelp)
	}
	if fields[2] == "Local" {
		return Window{}, fmt.Errorf("update window %q: time zone \"Local\" depends on the machine nogoo9 runs on: name the zone, e.g. UTC or Europe/Berlin", s)
	}
	if w.Location, err = loadLocation(fields[2]); err != nil {
		return Window{}, fmt.Errorf("update window %q: unknown time zone %q: use UTC or an IANA name such as Europe/Berlin", s, fields[2])
	}
	return w, nil
}

func (w *Window) parseDays(s string) error {
	if strings.EqualFold(s, "daily") || s == "*" {
		for i := range w.Days {
			w.Days[i] = true
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := dayNames[strings.ToLower(from)]
		if !ok {
			return fmt.Errorf("%q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", from)
		}
		if !isRange {
			w.Days[a] = true
			continue
		}
		b, ok := dayNames[strings.ToLower(to)]
		if !ok {
			return fmt.Errorf("%q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", to)
		}
		for d := a; ; d = (d + 1) % 7 {
			w.Days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

// clock parses "HH:MM" (00:00 to 24:00) into minutes after midnight.
func clock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q is not a time of day between 00:00 and 24:00", s)
	}
	return hh*60 + mm, nil
}

// String is the window as written (fields normalised to single spaces).
func (w Window) String() string { return w.text }

// Contains reports whether t falls inside the window.
//
// A window is a span of real time: it opens at Start on a day it names (in Location) and stays
// open for its length (End-Start, past midnight when End <= Start). So a daylight-saving change
// neither skips nor doubles it: a window in the hour the clocks skip opens at the instant that
// hour would have begun, and one in the hour they repeat stays open for its length once. Comparing
// the local clock instead (as before) left "Sun 02:00-03:00 Europe/Berlin" shut on the spring
// day and open two hours on the autumn one.
func (w Window) Contains(t time.Time) bool {
	length := time.Duration((w.End-w.Start+24*60)%(24*60)) * time.Minute
	if length == 0 {
		length = 24 * time.Hour
	}
	if length == 24*time.Hour && w.Days == [7]bool{true, true, true, true, true, true, true} {
		return true // every day, all day: no DST day may leave an hour between two of them
	}
	lt := t.In(w.Location)
	for back := 0; back <= 1; back++ { // a window opened today, or yesterday and past midnight
		y, m, d := lt.Date()
		day := time.Date(y, m, d-back, 12, 0, 0, 0, w.Location) // noon: never in a DST gap
		if !w.Days[day.Weekday()] {
			continue
		}
		start := time.Date(y, m, d-back, w.Start/60, w.Start%60, 0, 0, w.Location)
		if !t.Before(start) && t.Before(start.Add(length)) {
			return true
		}
	}
	return false
}

// locations caches the time zones windows name by name: a window is parsed on every look of
// the update-policy runner, for every workspace, and loading a zone reads and parses its file.
var locations sync.Map // string -> *time.Location

// loadLocation is time.LoadLocation, cached. The zone database is compiled into nogoo9
// (time/tzdata, imported below): its image holds nothing but the binary, so the system's zone
// files are not there, and without it every named zone was unknown.
func loadLocation(name string) (*time.Location, error) {
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, l)
	return l, nil
}
